package domain_test

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gpuq/gpuq/pkg/domain"
	dt "github.com/gpuq/gpuq/pkg/domain/domaintest"
)

func TestValidateFieldErrors(t *testing.T) {
	valid := func(edit func(r *domain.Request)) domain.Request {
		r := dt.Task().GPUs(2).Hours(4).Request()
		edit(&r)
		return r
	}
	cases := map[string]struct {
		req       domain.Request
		limits    domain.Limits
		wantField string // "" = valid
	}{
		"valid":                         {req: valid(func(*domain.Request) {})},
		"name missing":                  {req: valid(func(r *domain.Request) { r.Name = "" }), wantField: "name"},
		"name blank":                    {req: valid(func(r *domain.Request) { r.Name = " \t" }), wantField: "name"},
		"name 200 chars":                {req: valid(func(r *domain.Request) { r.Name = strings.Repeat("n", 200) })},
		"name 201 chars":                {req: valid(func(r *domain.Request) { r.Name = strings.Repeat("n", 201) }), wantField: "name"},
		"team missing":                  {req: valid(func(r *domain.Request) { r.Team = "" }), wantField: "team"},
		"team blank":                    {req: valid(func(r *domain.Request) { r.Team = "  " }), wantField: "team"},
		"team with dot":                 {req: valid(func(r *domain.Request) { r.Team = "ml.vision" }), wantField: "team"},
		"team with star":                {req: valid(func(r *domain.Request) { r.Team = "ml*" }), wantField: "team"},
		"team with gt":                  {req: valid(func(r *domain.Request) { r.Team = "ml>" }), wantField: "team"},
		"team with colon":               {req: valid(func(r *domain.Request) { r.Team = "ml:cv" }), wantField: "team"},
		"team with inner space":         {req: valid(func(r *domain.Request) { r.Team = "ml cv" }), wantField: "team"},
		"team 64 chars":                 {req: valid(func(r *domain.Request) { r.Team = strings.Repeat("t", 64) })},
		"team 65 chars":                 {req: valid(func(r *domain.Request) { r.Team = strings.Repeat("t", 65) }), wantField: "team"},
		"name with a terminal escape":   {req: valid(func(r *domain.Request) { r.Name = "ok\x1b[2J" }), wantField: "name"},
		"name with a newline":           {req: valid(func(r *domain.Request) { r.Name = "a\nb" }), wantField: "name"},
		"name with a C1 control":        {req: valid(func(r *domain.Request) { r.Name = "a\u009bb" }), wantField: "name"},
		"name with a bidi override":     {req: valid(func(r *domain.Request) { r.Name = "exe.\u202etxt" }), wantField: "name"},
		"name invalid UTF-8":            {req: valid(func(r *domain.Request) { r.Name = "a\xffb" }), wantField: "name"},
		"name in Unicode":               {req: valid(func(r *domain.Request) { r.Name = "résnet-日本" })},
		"team with a control":           {req: valid(func(r *domain.Request) { r.Team = "ml\x07" }), wantField: "team"},
		"hypothesis with an escape":     {req: valid(func(r *domain.Request) { r.Hypothesis = "x \x1b]0;pwned\x07" }), wantField: "hypothesis"},
		"command multi-line":            {req: valid(func(r *domain.Request) { r.Command = "set -e\n\tpython train.py" })},
		"command with an escape":        {req: valid(func(r *domain.Request) { r.Command = "echo \x1b[31m" }), wantField: "command"},
		"idempotency key with NUL":      {req: valid(func(r *domain.Request) { r.IdempotencyKey = "k\x00" }), wantField: "idempotency_key"},
		"env with credentials in a URL": {req: valid(func(r *domain.Request) { r.Env = map[string]string{"DATABASE_URL": "postgres://u:pw@db/x"} }), wantField: "env"},
		"env with a plain URL":          {req: valid(func(r *domain.Request) { r.Env = map[string]string{"DATA": "https://example.com/a@b"} })},
		"priority unknown":              {req: valid(func(r *domain.Request) { r.Priority = "urgent" }), wantField: "priority"},
		"priority empty: default":       {req: valid(func(r *domain.Request) { r.Priority = "" })},
		"gpus zero":                     {req: valid(func(r *domain.Request) { r.GPUs = 0 }), wantField: "gpus"},
		"gpus negative":                 {req: valid(func(r *domain.Request) { r.GPUs = -1 }), wantField: "gpus"},
		"gpus at default max":           {req: valid(func(r *domain.Request) { r.GPUs = 64 })},
		"gpus over default max":         {req: valid(func(r *domain.Request) { r.GPUs = 65 }), wantField: "gpus"},
		"gpus over configured max":      {req: valid(func(r *domain.Request) { r.GPUs = 3 }), limits: domain.Limits{MaxGPUs: 2}, wantField: "gpus"},
		"hours zero":                    {req: valid(func(r *domain.Request) { r.Hours = 0 }), wantField: "hours"},
		"hours negative":                {req: valid(func(r *domain.Request) { r.Hours = -1 }), wantField: "hours"},
		"hours NaN":                     {req: valid(func(r *domain.Request) { r.Hours = math.NaN() }), wantField: "hours"},
		"hours infinite":                {req: valid(func(r *domain.Request) { r.Hours = math.Inf(1) }), wantField: "hours"},
		"hours at default max":          {req: valid(func(r *domain.Request) { r.Hours = 168 })},
		"hours over default max":        {req: valid(func(r *domain.Request) { r.Hours = 168.5 }), wantField: "hours"},
		"hours over configured max":     {req: valid(func(r *domain.Request) { r.Hours = 2 }), limits: domain.Limits{MaxHours: 1}, wantField: "hours"},
		"hypothesis missing":            {req: valid(func(r *domain.Request) { r.Hypothesis = "" }), wantField: "hypothesis"},
		"hypothesis blank":              {req: valid(func(r *domain.Request) { r.Hypothesis = "\n " }), wantField: "hypothesis"},
		"command missing":               {req: valid(func(r *domain.Request) { r.Command = "" }), wantField: "command"},
		"command blank":                 {req: valid(func(r *domain.Request) { r.Command = "  " }), wantField: "command"},
		"signal SIGKILL":                {req: valid(func(r *domain.Request) { r.PreemptSignal = "SIGKILL" }), wantField: "preempt_signal"},
		"signal number":                 {req: valid(func(r *domain.Request) { r.PreemptSignal = "10" }), wantField: "preempt_signal"},
		"signal short lower":            {req: valid(func(r *domain.Request) { r.PreemptSignal = "usr2" })},
		"grace negative":                {req: valid(func(r *domain.Request) { r.GraceS = -1 }), wantField: "grace_s"},
		"grace over an hour":            {req: valid(func(r *domain.Request) { r.GraceS = 3601 }), wantField: "grace_s"},
		"grace an hour":                 {req: valid(func(r *domain.Request) { r.GraceS = 3600 })},
		"min gpu mem negative":          {req: valid(func(r *domain.Request) { r.MinGPUMemMiB = -1 }), wantField: "min_gpu_mem_mib"},
		"idempotency key 256":           {req: valid(func(r *domain.Request) { r.IdempotencyKey = strings.Repeat("k", 256) })},
		"idempotency key 257":           {req: valid(func(r *domain.Request) { r.IdempotencyKey = strings.Repeat("k", 257) }), wantField: "idempotency_key"},
		"hours a second":                {req: valid(func(r *domain.Request) { r.Hours = 1.0 / 3600 })},
		"hours under a second":          {req: valid(func(r *domain.Request) { r.Hours = 1e-300 }), wantField: "hours"},
		"hours just under a second":     {req: valid(func(r *domain.Request) { r.Hours = 0.999 / 3600 }), wantField: "hours"},
		"command at the exec limit":     {req: valid(func(r *domain.Request) { r.Command = strings.Repeat("c", domain.MaxArgBytes) })},
		"command over the exec limit":   {req: valid(func(r *domain.Request) { r.Command = strings.Repeat("c", domain.MaxArgBytes+1) }), wantField: "command"},
		"command with NUL":              {req: valid(func(r *domain.Request) { r.Command = "echo a\x00b" }), wantField: "command"},
		"dir with NUL":                  {req: valid(func(r *domain.Request) { r.Dir = "/tmp\x00x" }), wantField: "dir"},
		"env value with NUL":            {req: valid(func(r *domain.Request) { r.Env = map[string]string{"SEED": "1\x002"} }), wantField: "env.SEED"},
		"env entry at the exec limit":   {req: valid(func(r *domain.Request) { r.Env = map[string]string{"A": strings.Repeat("v", domain.MaxArgBytes-2)} }), wantField: "env"}, // over MaxEnvBytes in all
		"env entry over the exec limit": {req: valid(func(r *domain.Request) { r.Env = map[string]string{"A": strings.Repeat("v", domain.MaxArgBytes-1)} }), wantField: "env.A"},
		"name with a zero-width space":  {req: valid(func(r *domain.Request) { r.Name = "train\u200b" }), wantField: "name"},
		"name with a zero-width joiner": {req: valid(func(r *domain.Request) { r.Name = "a\u200db" }), wantField: "name"},
		"name with a word joiner":       {req: valid(func(r *domain.Request) { r.Name = "a\u2060b" }), wantField: "name"},
		"name with a BOM":               {req: valid(func(r *domain.Request) { r.Name = "\ufeffa" }), wantField: "name"},
		"team with a zero-width space":  {req: valid(func(r *domain.Request) { r.Team = "vis\u200bion" }), wantField: "team"},
		"team with an Arabic mark":      {req: valid(func(r *domain.Request) { r.Team = "vis\u061cion" }), wantField: "team"},
		"team with a bidi isolate":      {req: valid(func(r *domain.Request) { r.Team = "\u2066vision" }), wantField: "team"},
		"grace NaN":                     {req: valid(func(r *domain.Request) { r.GraceS = math.NaN() }), wantField: "grace_s"},
		"grace infinite":                {req: valid(func(r *domain.Request) { r.GraceS = math.Inf(1) }), wantField: "grace_s"},
		"first broken rule wins":        {req: valid(func(r *domain.Request) { r.Name, r.Team, r.GPUs = "", "", 0 }), wantField: "name"},
		"rules in order: gpus before hours": {
			req: valid(func(r *domain.Request) { r.GPUs, r.Hours, r.Command = 0, 0, "" }), wantField: "gpus",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			r := tc.req
			err := r.Validate(tc.limits)
			if tc.wantField == "" {
				if err != nil {
					t.Fatalf("Validate() = %v, want nil", err)
				}
				return
			}
			var fe *domain.FieldError
			if !errors.As(err, &fe) {
				t.Fatalf("Validate() = %v (%T), want a *domain.FieldError on %q", err, err, tc.wantField)
			}
			if fe.Field != tc.wantField || fe.Rule == "" {
				t.Errorf("FieldError{%q, %q}, want field %q with a rule", fe.Field, fe.Rule, tc.wantField)
			}
			if want := fe.Field + ": " + fe.Rule; err.Error() != want {
				t.Errorf("Error() = %q, want %q", err.Error(), want)
			}
		})
	}
}

// TestValidateNaNGrace: NaN compares false with every bound, so it must be
// refused explicitly (it also cannot be encoded as JSON).
func TestValidateNaNGrace(t *testing.T) {
	r := dt.Task().Request()
	r.GraceS = math.NaN()
	err := r.Validate(domain.Limits{})
	var fe *domain.FieldError
	field := ""
	if errors.As(err, &fe) {
		field = fe.Field
	}
	regression(t, "validate.go Validate: GraceS NaN passes `r.GraceS < 0 || r.GraceS > 3600`",
		cmp.Diff("grace_s", field))
}

// TestValidateFillsDefaults: what Validate normalises in place.
func TestValidateFillsDefaults(t *testing.T) {
	cases := map[string]struct {
		in, want domain.Request
	}{
		"defaults": {
			in: domain.Request{Name: "n", Team: "ml", GPUs: 1, Hours: 1, Hypothesis: "h", Command: "c"},
			want: domain.Request{Name: "n", Team: "ml", Priority: "medium", GPUs: 1, Hours: 1, Hypothesis: "h", Command: "c",
				PreemptSignal: "SIGUSR1", GraceS: 120},
		},
		"normalised": {
			in: domain.Request{Name: "  n ", Team: "\tml", Priority: " HIGH", GPUs: 1, Hours: 1, Hypothesis: "h", Command: "c",
				PreemptSignal: "term", GraceS: 30},
			want: domain.Request{Name: "n", Team: "ml", Priority: "high", GPUs: 1, Hours: 1, Hypothesis: "h", Command: "c",
				PreemptSignal: "SIGTERM", GraceS: 30},
		},
		"kept": {
			in: domain.Request{Name: "n", Team: "ml", Priority: "critical", GPUs: 8, Hours: 72, Hypothesis: "h", Command: "c",
				NoPreempt: true, PreemptSignal: "SIGUSR2", GraceS: 3600, GPUModel: "A100", MinGPUMemMiB: 1, IdempotencyKey: "k"},
			want: domain.Request{Name: "n", Team: "ml", Priority: "critical", GPUs: 8, Hours: 72, Hypothesis: "h", Command: "c",
				NoPreempt: true, PreemptSignal: "SIGUSR2", GraceS: 3600, GPUModel: "A100", MinGPUMemMiB: 1, IdempotencyKey: "k"},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got := tc.in
			if err := got.Validate(domain.DefaultLimits); err != nil {
				t.Fatalf("Validate() = %v", err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("request after Validate (-want +got):\n%s", diff)
			}
		})
	}
}

// A task's own notification destinations: the rules of CheckNotify,
// through Validate (every transport's check).
func TestValidateNotify(t *testing.T) {
	with := func(urls ...string) domain.Request {
		r := dt.Task().GPUs(1).Hours(1).Request()
		r.Notify = urls
		return r
	}
	cases := map[string]struct {
		req       domain.Request
		local     bool
		wantField string
	}{
		"none":                    {req: with()},
		"https":                   {req: with("https://hooks.slack.com/services/T0/B0/x")},
		"http with port":          {req: with("http://10.0.0.7:8080/gpuq")},
		"four":                    {req: with("https://a.example/1", "https://a.example/2", "https://a.example/3", "https://a.example/4")},
		"five":                    {req: with("https://a.example/1", "https://a.example/2", "https://a.example/3", "https://a.example/4", "https://a.example/5"), wantField: "notify"},
		"twice":                   {req: with("https://a.example/1", "https://a.example/1"), wantField: "notify"},
		"ftp":                     {req: with("ftp://a.example/x"), wantField: "notify"},
		"relative":                {req: with("/hook"), wantField: "notify"},
		"no host":                 {req: with("https:///x"), wantField: "notify"},
		"empty":                   {req: with(""), wantField: "notify"},
		"user and password":       {req: with("https://u:pw@a.example/x"), wantField: "notify"},
		"user only":               {req: with("https://u@a.example/x"), wantField: "notify"},
		"too long":                {req: with("https://a.example/" + strings.Repeat("x", domain.MaxNotifyURLBytes)), wantField: "notify"},
		"control character":       {req: with("https://a.example/\x1b[2J"), wantField: "notify"},
		"loopback":                {req: with("http://127.0.0.1:9000/x"), wantField: "notify"},
		"loopback v6":             {req: with("http://[::1]:9000/x"), wantField: "notify"},
		"localhost":               {req: with("http://localhost:9000/x"), wantField: "notify"},
		"link-local metadata":     {req: with("http://169.254.169.254/latest/meta-data"), wantField: "notify"},
		"unspecified":             {req: with("http://0.0.0.0/x"), wantField: "notify"},
		"loopback in gpuq dev":    {req: with("http://127.0.0.1:9000/x"), local: true},
		"localhost in gpuq dev":   {req: with("http://localhost:9000/x"), local: true},
		"credentials in gpuq dev": {req: with("http://u:pw@127.0.0.1/x"), local: true, wantField: "notify"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			err := tc.req.Validate(domain.Limits{NotifyLocal: tc.local})
			var fe *domain.FieldError
			switch {
			case tc.wantField == "" && err != nil:
				t.Fatalf("Validate = %v, want nil", err)
			case tc.wantField != "" && (!errors.As(err, &fe) || fe.Field != tc.wantField):
				t.Fatalf("Validate = %v, want a FieldError on %q", err, tc.wantField)
			}
		})
	}
}

func TestCheckDeadline(t *testing.T) {
	now := time.Date(2026, 12, 3, 16, 0, 0, 0, time.UTC)
	at := func(d time.Duration) *time.Time { x := now.Add(d); return &x }
	cases := map[string]struct {
		d     *time.Time
		valid bool
	}{
		"none":              {nil, true},
		"in six hours":      {at(6 * time.Hour), true},
		"in a second":       {at(time.Second), true},
		"in 366 days":       {at(domain.MaxDeadlineAhead), true},
		"now":               {at(0), false},
		"an hour ago":       {at(-time.Hour), false},
		"in two years":      {at(2 * 365 * 24 * time.Hour), false},
		"just past the max": {at(domain.MaxDeadlineAhead + time.Second), false},
		"zero time":         {&time.Time{}, false},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			err := domain.CheckDeadline(tc.d, now)
			var fe *domain.FieldError
			switch {
			case tc.valid && err != nil:
				t.Fatalf("CheckDeadline = %v, want nil", err)
			case !tc.valid && (!errors.As(err, &fe) || fe.Field != "deadline"):
				t.Fatalf("CheckDeadline = %v, want a FieldError on deadline", err)
			}
		})
	}
}
