#!/usr/bin/env bash
# The push job's history step (.github/workflows/ci.yml, job opperf-history):
#   ci/history.sh RESULTS.json SITE_DIR
# fetches the history (opperf-history.sqlite.gz on the opperf-history branch),
# appends RESULTS.json, lists the suspected regressions of the last commits in
# the job summary, writes the dashboard to SITE_DIR (with a copy of the
# history), and pushes the branch back as one commit that replaces the last,
# so the repository does not grow by a copy of the database per push. The
# push is --force-with-lease against the commit that was read: a history
# written meanwhile is never overwritten (the job's concurrency group
# serialises the writers, the lease makes sure of it).
# Needs GH_TOKEN (contents: write) and GITHUB_REPOSITORY (or OPPERF_HISTORY_REMOTE); the token goes to
# git through the environment, never on a command line or into a file.
set -euo pipefail

results=${1:?usage: ci/history.sh RESULTS.json SITE_DIR}
site=${2:?usage: ci/history.sh RESULTS.json SITE_DIR}
branch=opperf-history
db=opperf-history.sqlite
packed=$db.gz  # gzip: a third of the size, and git stores it as it is
remote=${OPPERF_HISTORY_REMOTE:-"https://github.com/${GITHUB_REPOSITORY:?}.git"}  # the override is for tests

export GIT_CONFIG_COUNT=1
export GIT_CONFIG_KEY_0="http.https://github.com/.extraheader"
GIT_CONFIG_VALUE_0="AUTHORIZATION: basic $(printf 'x-access-token:%s' "${GH_TOKEN:?}" | base64 -w0)"
export GIT_CONFIG_VALUE_0

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
git -C "$work" init -q
lease=""
if git ls-remote --exit-code --heads "$remote" "$branch" >/dev/null; then
    git -C "$work" fetch -q --depth=1 "$remote" "$branch"
    lease=$(git -C "$work" rev-parse FETCH_HEAD)
    git -C "$work" checkout -q FETCH_HEAD -- "$packed"
    gunzip "$work/$packed"
else
    status=$?
    [ "$status" = 2 ] || { echo "ci/history.sh: cannot reach $remote (git ls-remote: $status)" >&2; exit 1; }
    echo "ci/history.sh: no $branch branch yet: starting the history"
fi

python -m pytest_opperf history import "$results" --into "$work/$db"
# The trends of the last 10 commits, and the suspected regressions among them (a metric that
# stepped for the worse and held for two commits or more) as warnings in the job summary: drift
# across commits is judged here, never by a red build.
python -m pytest_opperf history "$work/$db" --last 10 --summary "${GITHUB_STEP_SUMMARY:-/dev/null}"
python -m pytest_opperf dashboard "$work/$db" --out "$site"
cp "$work/$db" "$site/$db"
gzip -9 "$work/$db"

git -C "$work" symbolic-ref HEAD "refs/heads/$branch"  # a commit without parents
git -C "$work" add "$packed"
git -C "$work" -c user.name="opperf history" -c user.email="opperf-history@users.noreply.github.com" \
    commit -q -m "opperf history after ${GITHUB_SHA:-this run}"
git -C "$work" push -q --force-with-lease="refs/heads/$branch:$lease" "$remote" "HEAD:refs/heads/$branch"
echo "ci/history.sh: pushed $packed to $branch"
