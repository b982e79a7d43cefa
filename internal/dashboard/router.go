package dashboard

import (
	"net/http"

	"github.com/kvroute/kvroute/router"
)

// RouterHandler is the router's HTTP surface with the dashboard mounted beside it:
// /dashboard/ and /api/history here, everything else (the OpenAI API, /api/stats,
// /metrics, probes) the router's. A nil d serves the router alone.
func RouterHandler(rt *router.Router, d *Dashboard) http.Handler {
	if d == nil {
		return rt.Handler()
	}
	mux := http.NewServeMux()
	h := d.Handler()
	mux.Handle("/dashboard/", h)
	mux.Handle("/dashboard", h)
	mux.Handle("/api/history", h)
	mux.Handle("/", rt.Handler())
	return mux
}

// FromRouter adapts the router's Stats snapshot (the document behind /api/stats) to a
// Source. It copies figures; it computes none.
func FromRouter(rt *router.Router) Source {
	return func() Sample {
		st := rt.Stats()
		s := Sample{
			TimeMs: st.Time.UnixMilli(),
			Fleet: FleetSample{
				ReqPerSecond:    st.Fleet.RequestsPerSecond,
				HitRate:         st.Fleet.HitRate,
				OverflowRatio:   st.Fleet.OverflowRatio,
				EventLagSeconds: st.Fleet.EventLagSeconds,
				TTFTP50Seconds:  st.Fleet.TTFTP50Seconds,
				TTFTP90Seconds:  st.Fleet.TTFTP90Seconds,
				Decisions:       map[string]uint64{},
			},
			Instances: make([]InstanceSample, 0, len(st.Instances)),
		}
		for _, in := range st.Instances {
			// Per-instance decision counts are cumulative: their sum is the fleet's, from
			// which SampleNow derives per-second rates.
			for k, n := range in.Decisions {
				s.Fleet.Decisions[k] += n
			}
			var joined int64
			if !in.JoinedAt.IsZero() {
				joined = in.JoinedAt.UnixMilli()
			}
			hit := in.HitRate
			if in.Requests == 0 {
				hit = -1 // nothing routed there yet: no hit rate to draw
			}
			s.Instances = append(s.Instances, InstanceSample{
				ID: in.ID, State: in.State, JoinedAtMs: joined,
				CachedBlocks: uint64(max(in.CachedBlocks, 0)), HitRate: hit,
				InFlight: in.InFlight + in.InFlightRemote, Requests: in.Requests,
				TTFTP50Seconds: in.TTFTP50Seconds, TTFTP90Seconds: in.TTFTP90Seconds,
				Warm: in.Warm, WarmupSeconds: in.WarmupSeconds,
			})
		}
		return s
	}
}
