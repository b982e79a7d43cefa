package sim

import (
	"fmt"
	"sort"
	"time"
)

// Profile is a named set of engine and cost-model settings. Apply copies it into a
// Config; every field stays overridable afterwards (the CLI applies a profile first,
// then the flags the user set).
type Profile struct {
	Name        string
	Description string
	BlockSize   int
	// NumGPUBlocks is the KV-cache capacity in blocks; see Memory for how the
	// calibrated profiles derive it.
	NumGPUBlocks        int
	MaxNumSeqs          int
	MaxNumBatchedTokens int
	MaxModelLen         int
	Cost                CostModel
	// Memory, when set, documents the arithmetic behind NumGPUBlocks.
	Memory *MemoryModel
}

// MemoryModel derives a KV-cache capacity the way vLLM does at start-up: the memory
// vLLM may use (GPU memory × utilization, on every GPU) minus the weights and the
// activation/graph reserve, divided by the bytes one token's K and V take.
type MemoryModel struct {
	NumGPUs              int
	GPUMemoryBytes       int64
	GPUMemoryUtilization float64
	WeightBytes          int64
	// ReserveBytesPerGPU is the activation peak, CUDA graphs and NCCL buffers per GPU.
	ReserveBytesPerGPU int64
	// Layers × KVHeads × HeadDim × 2 (K and V) × BytesPerElem = bytes per token.
	Layers, KVHeads, HeadDim, BytesPerElem int
}

// KVBytesPerToken is the size of one token's K and V over all layers.
func (m MemoryModel) KVBytesPerToken() int64 {
	return int64(m.Layers) * int64(m.KVHeads) * int64(m.HeadDim) * 2 * int64(m.BytesPerElem)
}

// KVCacheBytes is the memory left for the KV cache over all GPUs.
func (m MemoryModel) KVCacheBytes() int64 {
	usable := float64(m.GPUMemoryBytes) * m.GPUMemoryUtilization
	perGPU := int64(usable) - m.WeightBytes/int64(m.NumGPUs) - m.ReserveBytesPerGPU
	return perGPU * int64(m.NumGPUs)
}

// NumBlocks is the KV-cache capacity in blocks of blockSize tokens.
func (m MemoryModel) NumBlocks(blockSize int) int {
	return int(m.KVCacheBytes() / (m.KVBytesPerToken() * int64(blockSize)))
}

const gib = int64(1) << 30

// llama70bH100TP8Memory: Llama 3.1 70B (80 layers, 8 KV heads of 128 dims, BF16) on
// 8 × H100 80GB with vLLM's default --gpu-memory-utilization 0.9. Weights: 70.6e9
// parameters × 2 bytes, split over the 8 GPUs by tensor parallelism.
var llama70bH100TP8Memory = MemoryModel{
	NumGPUs: 8, GPUMemoryBytes: 80 * 1_000_000_000, GPUMemoryUtilization: 0.9,
	WeightBytes: 141_200_000_000, ReserveBytesPerGPU: 4 * gib,
	Layers: 80, KVHeads: 8, HeadDim: 128, BytesPerElem: 2,
}

var profiles = map[string]Profile{
	"tiny": {
		Name:        "tiny",
		Description: "a small fast engine for tests: 512 blocks of 16 tokens, cheap steps",
		BlockSize:   16, NumGPUBlocks: 512, MaxNumSeqs: 16, MaxNumBatchedTokens: 512, MaxModelLen: 8192,
		Cost: CostModel{
			StepBase:        2 * time.Millisecond,
			PerPrefillToken: 20 * time.Microsecond,
			PerDecodeSeq:    100 * time.Microsecond,
			PerContextToken: 0,
		},
	},
	"llama-3.1-70b-h100-tp8": {
		Name: "llama-3.1-70b-h100-tp8",
		Description: "Llama 3.1 70B Instruct, BF16, on 8 × H100 80GB SXM with tensor parallelism 8 " +
			"(prefill ≈ 25k tokens/s, decode step ≈ 12 ms at low batch; KV capacity from the memory arithmetic)",
		BlockSize:           16,
		NumGPUBlocks:        llama70bH100TP8Memory.NumBlocks(16),
		MaxNumSeqs:          256,
		MaxNumBatchedTokens: 8192,
		MaxModelLen:         131072,
		Cost: CostModel{
			StepBase:        12 * time.Millisecond,
			PerPrefillToken: 40 * time.Microsecond,
			PerDecodeSeq:    60 * time.Microsecond,
			PerContextToken: 15 * time.Nanosecond,
		},
		Memory: &llama70bH100TP8Memory,
	},
}

// Profiles returns the names of the built-in profiles, sorted.
func Profiles() []string {
	names := make([]string, 0, len(profiles))
	for n := range profiles {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// LookupProfile returns the named built-in profile.
func LookupProfile(name string) (Profile, error) {
	p, ok := profiles[name]
	if !ok {
		return Profile{}, fmt.Errorf("%w: unknown profile %q (have %v)", ErrConfig, name, Profiles())
	}
	return p, nil
}

// Apply copies the profile's engine and cost settings into cfg.
func (p Profile) Apply(cfg *Config) {
	cfg.Profile = p.Name
	cfg.BlockSize = p.BlockSize
	cfg.NumGPUBlocks = p.NumGPUBlocks
	cfg.MaxNumSeqs = p.MaxNumSeqs
	cfg.MaxNumBatchedTokens = p.MaxNumBatchedTokens
	cfg.MaxModelLen = p.MaxModelLen
	cfg.Cost = p.Cost
}
