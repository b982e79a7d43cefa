package dashboard

import "github.com/kvroute/kvroute/router"

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
