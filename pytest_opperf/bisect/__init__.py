"""Bisection of a performance regression with paired A/B steps (``python -m pytest_opperf
bisect``): the pure search (:mod:`.core`), the git side (:mod:`.repo`), one A/B step between two
commits (:mod:`.runner`), what it shows (:mod:`.report`) and the command (:mod:`.command`).
docs/bisect.md."""
