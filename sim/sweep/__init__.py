"""Design-space sweeps (``tricut sweep``): a grid file's points run as Ray tasks (or in this
process), one row each in a DuckDB database, Pareto plots from it. ``docs/sweeps.md``."""
