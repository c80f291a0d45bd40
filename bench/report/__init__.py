"""Human-readable views of results: matrix tables (and later compare / publish)."""
