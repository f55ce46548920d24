"""Join state and the stateful processors' state views (one view per input shape)."""
