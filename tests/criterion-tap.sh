#!/bin/sh
# Automake LOG_COMPILER for Criterion suites: run one suite and print its TAP report on stdout, so
# tap-driver.sh counts skips as SKIP (never as PASS). Criterion writes TAP to stderr with --tap=-.
exec "$@" --tap=- 2>&1
