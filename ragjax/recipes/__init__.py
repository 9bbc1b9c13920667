"""End-to-end recipes that wire the packages together (the embedded default lives here)."""
