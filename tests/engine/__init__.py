"""The core: the engine (timing wheel, purgatory, columns, validation) without Spark, files or Delta."""
