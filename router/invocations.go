package router

import (
	"net/http"
	"time"
)

// serveInvocations is raw mode with SageMaker's native semantics: the body is forwarded
// untouched to the engine's /invocations, and the affinity key is the routing group plus
// the first PrefixLengthBytes bytes of the body. The index is not used.
func (r *Router) serveInvocations(w http.ResponseWriter, req *http.Request) {
	start := time.Now()
	buf, err := r.readBody(w, req)
	if err != nil {
		r.reject(w, err, "")
		return
	}
	defer putBuf(buf)
	body := buf.Bytes()
	st := r.scratch.Get().(*reqState)
	d := &st.d
	*d = decision{st: st, info: RouteInfo{Group: r.groupOf(req.Header, nil)}}
	aff := newAffinity(d.info.Group, "")
	_, _ = aff.d.Write(body[:min(len(body), r.cfg.PrefixLengthBytes)])
	if err := r.candidates(st, "", aff.d.Sum64(), start.UnixNano()); err != nil {
		r.release(st)
		r.reject(w, err, "")
		return
	}
	defer r.release(st)
	st.group = st.group[:0]
	for i := range st.cands {
		st.group = append(st.group, -1)
		st.cands[i].PredictedTTFT = st.cands[i].inst.predictTTFT(0)
	}
	d.chosen, d.why = r.invoke.Select(&d.info, st.cands)
	d.took = time.Since(start)
	r.metrics.routingDuration.Observe(d.took.Seconds())
	// Retries re-run the main policy; for raw mode that is the same shape of chain.
	r.forward(w, req, d, body, fwdOpts{path: "/invocations", stream: false})
}
