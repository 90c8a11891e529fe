# Convenience targets; each calls a script that also works on its own.
.PHONY: build run test bench release

build:
	swift build

release:
	swift build -c release

run:
	bash scripts/run-daemon.sh

test:
	bash scripts/test.sh

bench:
	bash scripts/bench.sh
