"""The README, the docs pages and site, the notebooks, no figures in code, the layers' contracts."""
