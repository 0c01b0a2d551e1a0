"""What kernel names and device properties say (library, tiles, tensor cores, occupancy). No torch."""
