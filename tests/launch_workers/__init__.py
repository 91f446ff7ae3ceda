"""Small worker modules that the launch tests start with mp.spawn."""
