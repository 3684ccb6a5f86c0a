"""Work counts: the counting pass, and CPU instructions under valgrind."""
