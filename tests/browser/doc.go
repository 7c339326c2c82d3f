// Package browser is gpuq's browser test (`make test-browser`, run by
// .ci/run; issue #27 item 4): the dashboard at / in a headless Debian
// chromium driven by chromedp, against a real `bin/gpuq dev`. One task
// fills the node's GPUs and one waits; the page lists the waiting task with
// its start estimate and reason, and when the first task ends the waiting
// row changes without a reload. Between the two, the other views: the
// cluster's grid and the busy node's timeline from GET /v1/plan (the
// running task to its predicted end, the waiting one's reservation), the
// teams, the calibration, the waiting task's page (gpuq explain's
// breakdown, the estimates, a read-only checklist), every view on a
// 390 px phone, and 10,000 queued rows rendered in ≤ 1 s. A second test
// runs `gpuq dev --auth`: the page asks for a team's token once, shows
// that team's view and ticks the checklist through the API.
// GPUQ_SCREENSHOT=PATH also writes the cluster view there (the README's
// docs/img/dashboard.png). A screenshot of each step is kept as a test
// artefact (a new directory per run under $GPUQ_ARTIFACTS/browser, else
// under the system's temporary directory; the test logs its path). JavaScript exceptions and console errors fail the test.
//
// The build tag keeps `make test` from running it: it needs the binary that
// `make test-browser` builds ($GPUQ_BROWSER_BIN, default bin/gpuq) and a
// chromium ($GPUQ_CHROMIUM, else chromium or chromium-browser or
// google-chrome on PATH); without a chromium it skips and says why.
package browser
