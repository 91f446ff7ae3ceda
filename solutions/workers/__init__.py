"""Worker files written by the %%writefile cells in solutions/ (not kept in git)."""
