"""Time: injectable clocks and duration handling (watermarks and timers come later)."""
