"""Language-model experiments; registered experiment classes live in `params/`."""
