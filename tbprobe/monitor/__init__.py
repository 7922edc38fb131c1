"""The training monitor (TrainerMon)."""
