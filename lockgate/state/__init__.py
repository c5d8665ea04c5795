"""State: keyed state backends and the state handles user functions use."""
