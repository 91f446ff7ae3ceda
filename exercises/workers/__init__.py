"""Worker files written by the %%writefile cells in exercises/ (not kept in git)."""
