"""The search: stored sessions (Optuna studies), mptune's strategy, and the recommendation."""
