"""pytest glue: the role of a process and its session, fixtures, options, settings, the files a
session reads and writes, children and their hand-back."""
