"""The pip wheels of praxis, paxml and profiling: install.py puts them into a virtual environment."""
