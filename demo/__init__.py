"""ranktop demo job."""
