"""Test-support code shared by the suite (fakes, generators, reference runners)."""
