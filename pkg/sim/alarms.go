package sim

import (
	"container/heap"
	"slices"
	"time"

	"github.com/gpuq/gpuq/pkg/alarm"
	"github.com/gpuq/gpuq/pkg/domain"
	"github.com/gpuq/gpuq/pkg/estimate"
)

// The alarm in a simulation: at every instant the advisor's estimator
// observes the queue (Estimator.WatchNow, the advisor's Watch on its own
// pass of the policy) and judges every task whose wait passed the
// threshold of its estimate at submission (Estimator.Late, the advisor's
// own rule): the first verdict that is an alarm is the task's alarm.

// alarming is one run's alarms.
type alarming struct {
	cross   []time.Duration // when the wait passes the threshold (-1: not known)
	alarmAt []time.Duration // the first alarm (-1: none)
	cause   []alarm.Cause
	next    int      // the next task whose threshold is not known yet
	due     taskEnds // thresholds ahead (at: the crossing)
	late    []int    // past the threshold, still queued, not alarmed
}

func newAlarming(n int) *alarming {
	a := &alarming{cross: make([]time.Duration, n), alarmAt: make([]time.Duration, n), cause: make([]alarm.Cause, n)}
	for i := range n {
		a.cross[i], a.alarmAt[i] = -1, -1
	}
	return a
}

// alarmStep observes the queue at this instant and judges the late tasks.
func (d *driver) alarmStep() {
	a, e := d.alarms, d.est
	if a == nil || e == nil {
		return
	}
	if d.queued > 0 || e.est.Watching() {
		e.est.WatchNow(d.st, d.now)
	}
	// 1. Thresholds of the tasks queued long enough to be late soon.
	for a.next < len(d.tasks) && d.tasks[a.next].Submit+estimate.AlertMinWait <= d.vt {
		i := a.next
		a.next++
		if d.out.start[i] >= 0 || e.gpuq[i] == nil {
			continue
		}
		est := e.gpuq[i]()
		if est.Never {
			continue
		}
		a.cross[i] = d.tasks[i].Submit + estimate.Threshold(est)
		heap.Push(&a.due, taskEnd{at: a.cross[i], task: i})
	}
	// 2. Those past it now, still waiting their first start.
	for a.due.Len() > 0 && a.due[0].at < d.vt {
		c := heap.Pop(&a.due).(taskEnd)
		if d.out.start[c.task] < 0 {
			a.late = append(a.late, c.task)
		}
	}
	// 3. Judge each: the first alarm stays.
	a.late = slices.DeleteFunc(a.late, func(i int) bool {
		t := d.st.Tasks[d.tasks[i].ID]
		if d.out.start[i] >= 0 || t == nil || t.State != domain.Queued {
			return true
		}
		v, ok := e.est.Late(t, d.now)
		if ok && v.Alarm {
			a.alarmAt[i], a.cause[i] = d.vt, v.Cause
			return true
		}
		return false
	})
}

// AlarmMetrics judge the alarm over the judged tasks of a run (waits of at
// least 60 s): on a healthy run every alarm is false.
type AlarmMetrics struct {
	N int `json:"n"` // judged tasks
	// Late: judged tasks whose wait passed 2× their estimate at submission
	// (the threshold); Alarmed: those the alarm fired for.
	Late    int `json:"late"`
	Alarmed int `json:"alarmed"`
	// Rate: Alarmed / N.
	Rate    float64        `json:"rate"`
	ByCause map[string]int `json:"by_cause,omitempty"`
	// Faults: each --fault's run, judged against this run (the same
	// without the fault).
	Faults []FaultAlarms `json:"faults,omitempty"`
}

// FaultAlarms judge the alarm on a run with one fault against the same run
// without it.
type FaultAlarms struct {
	Fault Fault `json:"fault"`
	N     int   `json:"n"` // judged tasks of the faulted run
	// Late: judged tasks late in the faulted run; ByFault: of those, the
	// ones not late without the fault (late only because of it).
	Late    int `json:"late"`
	ByFault int `json:"late_by_fault"`
	Alarmed int `json:"alarmed"`
	// Recall: the share of ByFault that were alarmed (null when the fault
	// made no task late); FalseRate: the share of N alarmed that were
	// late without the fault's help (or not late).
	Recall    *float64 `json:"recall"`
	FalseRate float64  `json:"false_rate"`
	// ByFaultThrough: the ByFault tasks that waited through the fault
	// (submitted before it ended, started after it began): the ones an
	// observer of their own wait can know were held up by it;
	// RecallThrough: the share of them alarmed. The rest of ByFault were
	// submitted after the fault, into a schedule that diverged from the
	// healthy run's: BaseOnly counts the tasks late without the fault but
	// not with it, the same divergence seen from the other side.
	ByFaultThrough int      `json:"late_by_fault_through"`
	RecallThrough  *float64 `json:"recall_through"`
	BaseOnly       int      `json:"late_without_fault_only"`
	// MedianDelayS: median seconds from passing the threshold to the
	// alarm, over the alarmed ByFault tasks.
	MedianDelayS float64        `json:"median_delay_s"`
	ByCause      map[string]int `json:"by_cause,omitempty"`
	// Policy: the faulted run's average queueing delay against the
	// healthy run's, for scale.
	AvgQueueS     float64 `json:"avg_queue_s"`
	BaseAvgQueueS float64 `json:"base_avg_queue_s"`
}

// alarmRun is what judging needs of one run.
type alarmRun struct {
	tasks []Task
	out   *outcome
	est   *estimating
	al    *alarming
}

// judgedLate is, by task, whether it is judged (started, waited ≥ 60 s)
// and whether its wait passed its threshold.
func (r alarmRun) judgedLate(i int) (judged, late bool) {
	t := r.tasks[i]
	actual := r.out.start[i] - t.Submit
	if r.out.start[i] < 0 || actual < minJudgedWait {
		return false, false
	}
	if r.est.gpuq[i] == nil {
		return true, false
	}
	est := r.est.gpuq[i]()
	if est.Never {
		return true, false
	}
	return true, actual > estimate.Threshold(est)
}

// alarmMetrics judges a healthy run's alarms.
func (r alarmRun) metrics() *AlarmMetrics {
	m := &AlarmMetrics{ByCause: map[string]int{}}
	for i := range r.tasks {
		judged, late := r.judgedLate(i)
		if !judged {
			continue
		}
		m.N++
		if late {
			m.Late++
		}
		if r.al.alarmAt[i] >= 0 {
			m.Alarmed++
			m.ByCause[string(r.al.cause[i])]++
		}
	}
	if m.N > 0 {
		m.Rate = round(float64(m.Alarmed)/float64(m.N), 4)
	}
	return m
}

// judgeFault judges the faulted run f against the base run.
func judgeFault(fault Fault, base, f alarmRun) FaultAlarms {
	m := FaultAlarms{Fault: fault, ByCause: map[string]int{}}
	var delays []float64
	tp, tpThrough := 0, 0
	for i := range f.tasks {
		judged, late := f.judgedLate(i)
		if !judged {
			continue
		}
		m.N++
		_, lateBase := base.judgedLate(i)
		byFault := late && !lateBase
		through := byFault && f.tasks[i].Submit < fault.At+fault.For && f.out.start[i] > fault.At
		alarmed := f.al.alarmAt[i] >= 0
		if lateBase && !late {
			m.BaseOnly++
		}
		if through {
			m.ByFaultThrough++
		}
		if late {
			m.Late++
		}
		if byFault {
			m.ByFault++
		}
		if alarmed {
			m.Alarmed++
			m.ByCause[string(f.al.cause[i])]++
			if through {
				tpThrough++
			}
			if byFault {
				tp++
				delays = append(delays, (f.al.alarmAt[i] - f.al.cross[i]).Seconds())
			}
		}
	}
	if m.ByFault > 0 {
		r := round(float64(tp)/float64(m.ByFault), 4)
		m.Recall = &r
	}
	if m.ByFaultThrough > 0 {
		r := round(float64(tpThrough)/float64(m.ByFaultThrough), 4)
		m.RecallThrough = &r
	}
	if m.N > 0 {
		m.FalseRate = round(float64(m.Alarmed-tp)/float64(m.N), 4)
	}
	if len(delays) > 0 {
		slices.Sort(delays)
		m.MedianDelayS = round(medianSorted(delays), 1)
	}
	m.AvgQueueS = avgQueue(f)
	m.BaseAvgQueueS = avgQueue(base)
	return m
}

func avgQueue(r alarmRun) float64 {
	var s float64
	n := 0
	for i, t := range r.tasks {
		if r.out.start[i] >= 0 {
			s += (r.out.start[i] - t.Submit).Seconds()
			n++
		}
	}
	if n == 0 {
		return 0
	}
	return round(s/float64(n), 1)
}
