"""Test helpers that ship with trainready: `trainready.testing.emu`, a reference PrivateUse1
device for testing trainready (and seeing what it reports) without foreign hardware."""
