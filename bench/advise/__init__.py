"""`python -m bench advise`: every applicable cell for a model on some GPUs, ranked, with the smallest change that
makes each non-fitting one fit and the command that runs the chosen one. Every figure is the estimator's: PREDICTED."""
