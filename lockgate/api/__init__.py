"""The user-facing API: environment, streams, functions, state descriptors."""
