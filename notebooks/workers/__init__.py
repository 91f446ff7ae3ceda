"""Worker modules written by the notebooks' %%writefile cells.

Every stage notebook writes its worker here and launches it with mp.spawn;
the files are regenerated on every run and are not kept in git.
"""
