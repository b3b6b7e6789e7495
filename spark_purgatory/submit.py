"""The job as a ``spark-submit`` application file, for an installed wheel (docs/deployment.md)::

    spark-submit --py-files spark_purgatory.zip --jars "$(spark-purgatory jars)" \\
        "$(python -m spark_purgatory.submit)" --ops-path ... --checkpoint-path ...
"""

import os
import sys

if __name__ == "__main__":
    if __package__:  # python -m spark_purgatory.submit: where the application file is
        print(os.path.abspath(__file__))
    else:  # spark-submit (or python) runs this file (``__package__`` is empty): the job
        # Python put this file's folder, the package's own, first on the path: its modules would
        # shadow the standard library's (``inspect``) and the package would not be a package
        here = os.path.dirname(os.path.abspath(__file__))
        sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != here]
        from spark_purgatory.job import console

        sys.exit(console())
