"""Human-readable views of results: the matrix (MATRIX.md, matrix.csv), compare, publish (index + static site),
export (github-action-benchmark)."""
