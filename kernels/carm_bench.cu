// The C ABI: the benchmark table, device queries, cached device buffers, planning and timing.
#include "carm_bench.h"
#include "carm_internal.cuh"

#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <algorithm>
#include <cmath>
#include <map>
#include <mutex>
#include <string>
#include <vector>

// ---- launchers defined in k_cudacore.cu and k_tensor.cu
cudaError_t carm_launch_fma_fp32(const carm_launch&, cudaStream_t, const void**);
cudaError_t carm_launch_fma_fp64(const carm_launch&, cudaStream_t, const void**);
cudaError_t carm_launch_fma_fp16x2(const carm_launch&, cudaStream_t, const void**);
cudaError_t carm_launch_shared_read(const carm_launch&, cudaStream_t, const void**);
cudaError_t carm_launch_read_cg(const carm_launch&, cudaStream_t, const void**);
cudaError_t carm_launch_read_cg8(const carm_launch&, cudaStream_t, const void**);
cudaError_t carm_launch_read_l1(const carm_launch&, cudaStream_t, const void**);
cudaError_t carm_launch_write(const carm_launch&, cudaStream_t, const void**);
cudaError_t carm_launch_copy(const carm_launch&, cudaStream_t, const void**);
template <int C, int U, int MINB> cudaError_t carm_launch_mix_fp32_global(const carm_launch&, cudaStream_t, const void**);
template <int C> cudaError_t carm_launch_mix_fp32_tma(const carm_launch&, cudaStream_t, const void**);
int carm_mix_tma_smem_bytes();
template <int C, int SU> cudaError_t carm_launch_mix_fp32_shared(const carm_launch&, cudaStream_t, const void**);
template <int C> cudaError_t carm_launch_mix_bf16_global(const carm_launch&, cudaStream_t, const void**);
template <int C> cudaError_t carm_launch_mix_bf16_wgmma(const carm_launch&, cudaStream_t, const void**);
template <int OP> cudaError_t carm_launch_wgmma(const carm_launch&, cudaStream_t, const void**);
template <int OP> cudaError_t carm_launch_mma_sync(const carm_launch&, cudaStream_t, const void**);
int carm_wgmma_smem_bytes(int wgs);
int carm_bulk_smem_bytes();
cudaError_t carm_launch_l2_bulk(const carm_launch&, cudaStream_t, const void**);

namespace {

thread_local std::string g_error;

int fail(int code, const char* fmt, ...) {
  char buf[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  g_error = buf;
  return code;
}

int cuda_fail(cudaError_t e, const char* what) {
  cudaGetLastError();  // clear a non-sticky error so later calls start clean
  const bool no_gpu = e == cudaErrorNoDevice || e == cudaErrorInsufficientDriver || e == cudaErrorInitializationError ||
                      e == cudaErrorStubLibrary || e == cudaErrorCallRequiresNewerDriver || e == cudaErrorSystemNotReady ||
                      e == cudaErrorDevicesUnavailable || e == cudaErrorSystemDriverMismatch;
  if (no_gpu)
    return fail(CARM_ERR_NO_GPU, "no usable NVIDIA GPU: %s failed with %s (%s)", what, cudaGetErrorName(e), cudaGetErrorString(e));
  return fail(CARM_ERR_CUDA, "%s failed: %s (%s)", what, cudaGetErrorName(e), cudaGetErrorString(e));
}

#define CARM_CUDA(call)                                  \
  do {                                                   \
    cudaError_t e_ = (call);                             \
    if (e_ != cudaSuccess) return cuda_fail(e_, #call);  \
  } while (0)

// How the work of one launch is counted.
enum shape_t {
  SHAPE_THREADS,  // items = grid * block * iterations * items_per_thread_iter (compute, shared)
  SHAPE_STREAM,   // items = elems * passes (global-memory streams and mixed rows)
  SHAPE_WRAP,     // items = grid * block * iterations * unroll over a power-of-two working set (L2 bulk reads)
};
// Default working set, from device attributes.
enum size_t_ { WS_NONE, WS_L1, WS_L2_PART, WS_L2_FULL, WS_HBM };

struct entry {
  const char* name; const char* kind; const char* carm_key; const char* memory_key; const char* variant;
  const char* instruction; const char* item;
  int min_arch, max_arch;
  double flops_per_item, bytes_per_item, intensity;
  carm_launch_fn launch;
  shape_t shape;
  double items_per_thread_iter;  // SHAPE_THREADS
  int block;                     // threads per block (wgmma: per warpgroup count, see plan)
  int smem_kind;                 // 0 none, 1 shared tile (8 loads * block * 16 B), 2 wgmma tiles, 4 bulk-copy stages, 5 TMA ring of the FP32 sweep
  size_t_ ws;
  int buffers;                   // global buffers: 0, 1 (read) or 2 (read + write)
  uint32_t seed;                 // Tensor Core rows: 0 = zero data
  long long default_iters;
  int unroll;                    // SHAPE_STREAM: elements per thread per step (rounding granule)
};

constexpr double WG_FLOPS_K16 = 2.0 * 64 * 256 * 16, WG_FLOPS_K8 = 2.0 * 64 * 256 * 8, WG_FLOPS_K32 = 2.0 * 64 * 256 * 32;
constexpr double MMA_K16 = 2.0 * 16 * 8 * 16, MMA_K8 = 2.0 * 16 * 8 * 8, MMA_K32 = 2.0 * 16 * 8 * 32;
// per thread per iteration: 8 chains x 8 unrolled FMAs (k_cudacore.cu FMA_CHAINS * FMA_UNROLL)
constexpr double FMA_PER_THREAD_ITER = 64;
// wgmma: 4 instructions per warpgroup per iteration = 4/128 per thread
constexpr double WG_PER_THREAD_ITER = 4.0 / 128;
// mma.sync: 8 chains per warp per iteration = 8/32 per thread
constexpr double MMA_PER_THREAD_ITER = 8.0 / 32;

std::vector<entry> build_table() {
  std::vector<entry> t;
  auto add = [&](entry e) { t.push_back(e); };
  // CUDA-core FMA (1 FMA = 2 FLOPs; HFMA2 = 2 FMAs = 4 FLOPs)
  add({"fp64_fma", "compute", "fp64", "", "chains", "DFMA", "one FMA per thread", 80, 0, 2, 0, 0, carm_launch_fma_fp64, SHAPE_THREADS, FMA_PER_THREAD_ITER, 256, 0, WS_NONE, 0, 0, 2000, 1});
  add({"fp32_fma", "compute", "fp32", "", "chains", "FFMA", "one FMA per thread", 80, 0, 2, 0, 0, carm_launch_fma_fp32, SHAPE_THREADS, FMA_PER_THREAD_ITER, 256, 0, WS_NONE, 0, 0, 4000, 1});
  add({"fp16x2_fma", "compute", "fp16x2", "", "chains", "HFMA2", "one HFMA2 per thread", 80, 0, 4, 0, 0, carm_launch_fma_fp16x2, SHAPE_THREADS, FMA_PER_THREAD_ITER, 256, 0, WS_NONE, 0, 0, 4000, 1});
  // wgmma, sm_90a only
  struct wgrow { const char* key; const char* ins; double flops; carm_launch_fn fn; };
  const wgrow wg[] = {
      {"tc_bf16", "wgmma.m64n256k16.f32.bf16", WG_FLOPS_K16, carm_launch_wgmma<0>},
      {"tc_fp16", "wgmma.m64n256k16.f32.f16", WG_FLOPS_K16, carm_launch_wgmma<1>},
      {"tc_fp16_f16acc", "wgmma.m64n256k16.f16.f16", WG_FLOPS_K16, carm_launch_wgmma<2>},
      {"tc_tf32", "wgmma.m64n256k8.f32.tf32", WG_FLOPS_K8, carm_launch_wgmma<3>},
      {"tc_fp8_e4m3", "wgmma.m64n256k32.f32.e4m3", WG_FLOPS_K32, carm_launch_wgmma<4>},
      {"tc_fp8_e5m2", "wgmma.m64n256k32.f32.e5m2", WG_FLOPS_K32, carm_launch_wgmma<5>},
      {"tc_int8", "wgmma.m64n256k32.s32.s8", WG_FLOPS_K32, carm_launch_wgmma<6>},
  };
  static std::vector<std::string> names;  // storage for generated names
  names.reserve(256);
  for (const auto& r : wg)
    for (int z = 0; z < 2; ++z) {
      names.push_back(std::string(r.key) + "_wgmma_" + (z ? "zero" : "rand"));
      add({names.back().c_str(), "compute", r.key, "", z ? "zero" : "rand", r.ins, "one wgmma per warpgroup", 90, 90, r.flops, 0, 0, r.fn,
           SHAPE_THREADS, WG_PER_THREAD_ITER, 128, 2, WS_NONE, 0, z ? 0u : 12345u, 20000, 1});
    }
  // mma.sync (Ampere / Ada; also runs on Hopper, below the wgmma roof)
  const wgrow ms[] = {
      {"tc_bf16", "mma.m16n8k16.f32.bf16", MMA_K16, carm_launch_mma_sync<0>},
      {"tc_fp16", "mma.m16n8k16.f32.f16", MMA_K16, carm_launch_mma_sync<1>},
      {"tc_fp16_f16acc", "mma.m16n8k16.f16.f16", MMA_K16, carm_launch_mma_sync<2>},
      {"tc_tf32", "mma.m16n8k8.f32.tf32", MMA_K8, carm_launch_mma_sync<3>},
      {"tc_fp8_e4m3", "mma.m16n8k32.f32.e4m3", MMA_K32, carm_launch_mma_sync<4>},
      {"tc_fp8_e5m2", "mma.m16n8k32.f32.e5m2", MMA_K32, carm_launch_mma_sync<5>},
      {"tc_int8", "mma.m16n8k32.s32.s8", MMA_K32, carm_launch_mma_sync<6>},
  };
  for (const auto& r : ms)
    for (int z = 0; z < 2; ++z) {
      names.push_back(std::string(r.key) + "_mma_" + (z ? "zero" : "rand"));
      const bool fp8 = std::strstr(r.key, "fp8") != nullptr;
      add({names.back().c_str(), "compute", r.key, "", z ? "zero" : "rand", r.ins, "one mma.sync per warp", fp8 ? 89 : 80, 0, r.flops, 0, 0, r.fn,
           SHAPE_THREADS, MMA_PER_THREAD_ITER, 256, 0, WS_NONE, 0, z ? 0u : 12345u, 20000, 1});
    }
  // memory levels: one item = one 16-byte access per thread
  add({"shared_read", "memory", "shared", "shared", "read", "LDS.128", "one 16-byte shared load", 80, 0, 0, 16, 0, carm_launch_shared_read, SHAPE_THREADS, 8, 256, 1, WS_NONE, 0, 0, 20000, 1});
  add({"l1_read", "memory", "l1", "l1", "read", "LDG.E.128 (L1)", "one 16-byte load", 80, 0, 0, 16, 0, carm_launch_read_l1, SHAPE_STREAM, 0, 256, 0, WS_L1, 1, 0, 2000, 4});
  add({"l2_read_partition", "memory", "l2", "l2", "partition", "LDG.E.128 (cg)", "one 16-byte load", 80, 0, 0, 16, 0, carm_launch_read_cg, SHAPE_STREAM, 0, 256, 0, WS_L2_PART, 1, 0, 200, 4});
  add({"l2_read_full", "memory", "l2", "l2", "full", "LDG.E.128 (cg)", "one 16-byte load", 80, 0, 0, 16, 0, carm_launch_read_cg, SHAPE_STREAM, 0, 256, 0, WS_L2_FULL, 1, 0, 50, 4});
  add({"l2_read_partition_u8", "memory", "l2", "l2", "partition-u8", "LDG.E.128 (cg) x8", "one 16-byte load", 80, 0, 0, 16, 0, carm_launch_read_cg8, SHAPE_STREAM, 0, 256, 0, WS_L2_PART, 1, 0, 200, 8});
  add({"l2_read_full_u8", "memory", "l2", "l2", "full-u8", "LDG.E.128 (cg) x8", "one 16-byte load", 80, 0, 0, 16, 0, carm_launch_read_cg8, SHAPE_STREAM, 0, 256, 0, WS_L2_FULL, 1, 0, 50, 8});
  // TMA: per item 1/32 of a 16 KiB bulk copy (one thread of a 32-thread block issues them)
  add({"l2_read_bulk", "memory", "l2", "l2", "tma-bulk", "UBLKCP (cp.async.bulk)", "1/32 of a 16 KiB bulk copy", 90, 0, 0, 512, 0, carm_launch_l2_bulk, SHAPE_WRAP, 0, 32, 4, WS_L2_FULL, 1, 0, 2000, 1});
  add({"l2_read_bulk_partition", "memory", "l2", "l2", "tma-bulk-partition", "UBLKCP (cp.async.bulk)", "1/32 of a 16 KiB bulk copy", 90, 0, 0, 512, 0, carm_launch_l2_bulk, SHAPE_WRAP, 0, 32, 4, WS_L2_PART, 1, 0, 2000, 1});
  add({"hbm_read_bulk", "memory", "hbm", "hbm", "tma-bulk", "UBLKCP (cp.async.bulk)", "1/32 of a 16 KiB bulk copy", 90, 0, 0, 512, 0, carm_launch_l2_bulk, SHAPE_WRAP, 0, 32, 4, WS_HBM, 1, 0, 20, 1});
  add({"hbm_read", "memory", "hbm", "hbm", "read", "LDG.E.128 (cg)", "one 16-byte load", 80, 0, 0, 16, 0, carm_launch_read_cg, SHAPE_STREAM, 0, 256, 0, WS_HBM, 1, 0, 2, 4});
  add({"hbm_write", "memory", "hbm", "hbm", "write", "STG.E.128 (cg)", "one 16-byte store", 80, 0, 0, 16, 0, carm_launch_write, SHAPE_STREAM, 0, 256, 0, WS_HBM, 2, 0, 2, 4});
  add({"hbm_copy", "memory", "hbm", "hbm", "copy", "LDG+STG.E.128", "one 16-byte load and store", 80, 0, 0, 32, 0, carm_launch_copy, SHAPE_STREAM, 0, 256, 0, WS_HBM, 2, 0, 2, 4});
  // mixed sweep: FP32 against HBM, L2 and shared memory; BF16 Tensor Cores against HBM (wgmma on
  // sm_90a, mma.sync before). One item = one 16-byte load: 4 floats x C FMAs = 8C FLOPs, AI = C/2.
#define MIXF_TMA(LEVEL, WS, C, iters)                                                                                             \
  names.push_back("mix_fp32_" LEVEL "_tma_c" #C);                                                                                   \
  add({names.back().c_str(), "mixed", "fp32", LEVEL, "tma-c" #C, "FFMA+UBLKCP+LDS.128", "one 16-byte load and 4*C FMAs", 90, 0,      \
       8.0 * C, 16, C, carm_launch_mix_fp32_tma<C>, SHAPE_WRAP, 0, 256, 5, WS, 1, 0, iters, 4});
#define MIXF_U(LEVEL, WS, U, MINB, C, iters)                                                                                        \
  names.push_back("mix_fp32_" LEVEL "_u" #U "_c" #C);                                                                               \
  add({names.back().c_str(), "mixed", "fp32", LEVEL, "u" #U "-c" #C, "FFMA+LDG.128", "one 16-byte load and 4*C FMAs", 80, 0, 8.0 * C, \
       16, C, carm_launch_mix_fp32_global<C, U, MINB>, SHAPE_STREAM, 0, 256, 0, WS, 1, 0, iters, U});
#define MIXF(C, iters_hbm, iters_l2, iters_sh)                                                                                       \
  names.push_back("mix_fp32_hbm_c" #C);                                                                                             \
  add({names.back().c_str(), "mixed", "fp32", "hbm", "c" #C, "FFMA+LDG.128", "one 16-byte load and 4*C FMAs", 80, 0, 8.0 * C, 16, C, \
       carm_launch_mix_fp32_global<C, 4, 8>, SHAPE_STREAM, 0, 256, 0, WS_HBM, 1, 0, iters_hbm, 4});                                      \
  names.push_back("mix_fp32_l2_c" #C);                                                                                              \
  add({names.back().c_str(), "mixed", "fp32", "l2", "c" #C, "FFMA+LDG.128", "one 16-byte load and 4*C FMAs", 80, 0, 8.0 * C, 16, C,  \
       carm_launch_mix_fp32_global<C, 4, 8>, SHAPE_STREAM, 0, 256, 0, WS_L2_PART, 1, 0, iters_l2, 4});                                   \
  names.push_back("mix_fp32_shared_c" #C);                                                                                          \
  add({names.back().c_str(), "mixed", "fp32", "shared", "c" #C, "FFMA+LDS.128", "one 16-byte load and 4*C FMAs", 80, 0, 8.0 * C, 16, \
       C, carm_launch_mix_fp32_shared<C, 8>, SHAPE_THREADS, 8, 256, 1, WS_NONE, 0, 0, iters_sh, 1});                       \
  MIXF_TMA("hbm", WS_HBM, C, 200) MIXF_TMA("l2", WS_L2_FULL, C, 2000)
#define MIXV(C, iters_sh) MIXF_U("hbm", WS_HBM, 8, 4, C, 1) MIXF_U("hbm", WS_HBM, 16, 2, C, 1) MIXF_U("l2", WS_L2_PART, 8, 4, C, 20) \
  MIXF_U("l2", WS_L2_PART, 16, 2, C, 20)                                                                                            \
  names.push_back("mix_fp32_shared_s4_c" #C);                                                                                       \
  add({names.back().c_str(), "mixed", "fp32", "shared", "s4-c" #C, "FFMA+LDS.128", "one 16-byte load and 4*C FMAs", 80, 0, 8.0 * C,  \
       16, C, carm_launch_mix_fp32_shared<C, 4>, SHAPE_THREADS, 4, 256, 1, WS_NONE, 0, 0, iters_sh, 1});
  MIXV(4, 4000) MIXV(8, 2000) MIXV(16, 1000) MIXV(32, 500) MIXV(64, 250)
#undef MIXV
  MIXF(1, 2, 100, 4000) MIXF(2, 2, 100, 4000) MIXF(4, 2, 100, 2000) MIXF(8, 2, 50, 1000) MIXF(16, 2, 20, 500)
  MIXF(32, 1, 10, 250) MIXF(64, 1, 5, 125) MIXF(128, 1, 2, 60) MIXF(256, 1, 1, 30)
#undef MIXF
  // mma.sync reaches ~70% of the wgmma roof on Hopper, so it validates the CARM only before sm_90
#define MIXT(C, iters)                                                                                                                \
  names.push_back("mix_bf16_hbm_c" #C);                                                                                               \
  add({names.back().c_str(), "mixed", "tc_bf16", "hbm", "c" #C, "HMMA.16816+LDG.128", "one 16-byte load and C/32 mma.sync", 80, 89,    \
       128.0 * C, 16, C, carm_launch_mix_bf16_global<C>, SHAPE_STREAM, 0, 256, 0, WS_HBM, 1, 0, iters, 4});
  MIXT(1, 2) MIXT(2, 2) MIXT(4, 2) MIXT(8, 2) MIXT(16, 2) MIXT(32, 1) MIXT(64, 1)
#undef MIXT
  // per item: 2 warpgroups * C * 524288 FLOPs / (256 threads * 16 loads) = 256*C FLOPs (k_tensor.cu)
#define MIXW(C, iters)                                                                                                                \
  names.push_back("mix_bf16_wgmma_hbm_c" #C);                                                                                         \
  add({names.back().c_str(), "mixed", "tc_bf16", "hbm", "wgmma-c" #C, "WGMMA.64x256x16+LDG.128", "one 16-byte load and C/2048 wgmma", \
       90, 90, 256.0 * C, 16, C, carm_launch_mix_bf16_wgmma<C>, SHAPE_STREAM, 0, 128, 2, WS_HBM, 1, 0, iters, 16});
  MIXW(1, 2) MIXW(2, 2) MIXW(4, 2) MIXW(8, 2) MIXW(16, 2) MIXW(32, 1) MIXW(64, 1) MIXW(128, 1)
#undef MIXW
  return t;
}

const std::vector<entry>& table() {
  static const std::vector<entry> t = build_table();
  return t;
}

// ---- per-device state: attributes, stream, events, buffers (kept across calls)
struct device_state {
  bool ready = false;
  struct carm_device_info info{};
  cudaStream_t stream = nullptr;
  cudaEvent_t start = nullptr, stop = nullptr;
  void* buf[2] = {nullptr, nullptr};
  size_t buf_bytes[2] = {0, 0};
  float* out = nullptr;
  int out_blocks = 0;
};
std::mutex g_mutex;
std::map<int, device_state> g_devices;

void copy_str(char* dst, size_t n, const char* src) {
  std::strncpy(dst, src, n - 1);
  dst[n - 1] = '\0';
}

int query_device(int device, struct carm_device_info* out) {
  int count = 0;
  CARM_CUDA(cudaGetDeviceCount(&count));
  if (device < 0 || device >= count)
    return fail(CARM_ERR_INVALID, "device %d does not exist: %d CUDA device(s) visible", device, count);
  cudaDeviceProp p;
  CARM_CUDA(cudaGetDeviceProperties(&p, device));
  std::memset(out, 0, sizeof *out);
  copy_str(out->name, sizeof out->name, p.name);
  out->cc_major = p.major;
  out->cc_minor = p.minor;
  out->sm_count = p.multiProcessorCount;
  int v = 0;
  if (cudaDeviceGetAttribute(&v, cudaDevAttrClockRate, device) == cudaSuccess) out->clock_khz = v;
  if (cudaDeviceGetAttribute(&v, cudaDevAttrMemoryClockRate, device) == cudaSuccess) out->memory_clock_khz = v;
  if (cudaDeviceGetAttribute(&v, cudaDevAttrGlobalMemoryBusWidth, device) == cudaSuccess) out->memory_bus_bits = v;
  cudaGetLastError();
  out->l2_bytes = p.l2CacheSize;
  out->smem_per_sm_bytes = (long long)p.sharedMemPerMultiprocessor;
  out->smem_per_block_optin_bytes = (long long)p.sharedMemPerBlockOptin;
  out->global_mem_bytes = (long long)p.totalGlobalMem;
  out->max_threads_per_sm = p.maxThreadsPerMultiProcessor;
  out->regs_per_sm = p.regsPerMultiprocessor;
  cudaFuncAttributes fa;
  cudaGetLastError();
  const void* k = nullptr;
  carm_launch_fma_fp32(carm_launch{}, nullptr, &k);
  CARM_CUDA(cudaSetDevice(device));
  cudaError_t e = cudaFuncGetAttributes(&fa, k);
  if (e == cudaErrorNoKernelImageForDevice || e == cudaErrorInvalidDeviceFunction) {
    cudaGetLastError();
    out->compiled_arch = 0;  // this library has no machine code for the device
  } else if (e != cudaSuccess) {
    return cuda_fail(e, "cudaFuncGetAttributes");
  } else {
    out->compiled_arch = fa.binaryVersion;
  }
  return CARM_OK;
}

int ensure_device(int device, device_state** st) {
  device_state& s = g_devices[device];
  if (!s.ready) {
    int rc = query_device(device, &s.info);
    if (rc) return rc;
    CARM_CUDA(cudaSetDevice(device));
    CARM_CUDA(cudaStreamCreateWithFlags(&s.stream, cudaStreamNonBlocking));
    CARM_CUDA(cudaEventCreate(&s.start));
    CARM_CUDA(cudaEventCreate(&s.stop));
    s.ready = true;
  }
  CARM_CUDA(cudaSetDevice(device));
  *st = &s;
  return CARM_OK;
}

__global__ void fill_kernel(uint32_t* p, size_t words, uint32_t seed) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < words; i += (size_t)gridDim.x * blockDim.x)
    p[i] = __float_as_uint(carm_uniform(seed + (uint32_t)i));  // finite floats in [-1, 1)
}

int ensure_buffer(device_state& s, int which, size_t bytes) {
  if (s.buf_bytes[which] >= bytes) return CARM_OK;
  if (s.buf[which]) {
    CARM_CUDA(cudaFree(s.buf[which]));
    s.buf[which] = nullptr;
    s.buf_bytes[which] = 0;
  }
  CARM_CUDA(cudaMalloc(&s.buf[which], bytes));
  s.buf_bytes[which] = bytes;
  fill_kernel<<<s.info.sm_count * 8, 256, 0, s.stream>>>((uint32_t*)s.buf[which], bytes / 4, 777u + which);
  CARM_CUDA(cudaGetLastError());
  CARM_CUDA(cudaStreamSynchronize(s.stream));
  return CARM_OK;
}

double default_ws(const entry& e, const struct carm_device_info& d) {
  const double l2 = (double)d.l2_bytes;
  switch (e.ws) {
    case WS_L1: return 16.0 * 1024 * 4 * d.sm_count;  // 64 KiB per SM: well inside L1 with a small carveout
    case WS_L2_PART: return 0.25 * l2;
    case WS_L2_FULL: return 0.8 * l2;
    case WS_HBM: {
      double ws = std::max(8.0 * l2, 1024.0 * 1024 * 1024);
      return std::min(ws, (double)d.global_mem_bytes / 8);
    }
    default: return 0;
  }
}

}  // namespace

extern "C" {

int carm_abi_version(void) { return CARM_ABI_VERSION; }

int carm_bench_count(void) { return (int)table().size(); }

int carm_bench_find(const char* name) {
  if (!name) return -1;
  const auto& t = table();
  for (size_t i = 0; i < t.size(); ++i)
    if (std::strcmp(t[i].name, name) == 0) return (int)i;
  return -1;
}

int carm_bench_describe(int index, struct carm_bench_info* out) {
  const auto& t = table();
  if (index < 0 || index >= (int)t.size())
    return fail(CARM_ERR_INVALID, "benchmark index %d out of range: expected 0..%d", index, (int)t.size() - 1);
  if (!out) return fail(CARM_ERR_INVALID, "carm_bench_describe: out is NULL");
  const entry& e = t[index];
  std::memset(out, 0, sizeof *out);
  copy_str(out->name, sizeof out->name, e.name);
  copy_str(out->kind, sizeof out->kind, e.kind);
  copy_str(out->carm_key, sizeof out->carm_key, e.carm_key);
  copy_str(out->memory_key, sizeof out->memory_key, e.memory_key);
  copy_str(out->variant, sizeof out->variant, e.variant);
  copy_str(out->instruction, sizeof out->instruction, e.instruction);
  copy_str(out->item, sizeof out->item, e.item);
  out->min_arch = e.min_arch;
  out->max_arch = e.max_arch;
  out->flops_per_item = e.flops_per_item;
  out->bytes_per_item = e.bytes_per_item;
  out->intensity_param = e.intensity;
  out->size_is_bytes = e.shape == SHAPE_THREADS ? 0 : 1;
  return CARM_OK;
}

int carm_device_count(int* count) {
  std::lock_guard<std::mutex> lock(g_mutex);
  if (!count) return fail(CARM_ERR_INVALID, "carm_device_count: count is NULL");
  *count = 0;
  CARM_CUDA(cudaGetDeviceCount(count));
  return CARM_OK;
}

int carm_device_info(int device, struct carm_device_info* out) {
  std::lock_guard<std::mutex> lock(g_mutex);
  if (!out) return fail(CARM_ERR_INVALID, "carm_device_info: out is NULL");
  device_state* s = nullptr;
  int rc = ensure_device(device, &s);
  if (rc) return rc;
  *out = s->info;
  return CARM_OK;
}

int carm_bench_run(int index, const struct carm_bench_params* params, struct carm_bench_result* out) {
  std::lock_guard<std::mutex> lock(g_mutex);
  const auto& t = table();
  if (index < 0 || index >= (int)t.size())
    return fail(CARM_ERR_INVALID, "benchmark index %d out of range: expected 0..%d", index, (int)t.size() - 1);
  if (!params || !out) return fail(CARM_ERR_INVALID, "carm_bench_run: params and out must not be NULL");
  const entry& e = t[index];
  if (params->launches < 0 || params->warmup_launches < 0 || params->iterations < 0 || params->size_bytes < 0)
    return fail(CARM_ERR_INVALID, "%s: launches, warmup_launches, iterations and size_bytes must be >= 0", e.name);
  device_state* s = nullptr;
  int rc = ensure_device(params->device, &s);
  if (rc) return rc;
  const struct carm_device_info& d = s->info;
  const int arch = d.cc_major * 10 + d.cc_minor;
  if (arch < e.min_arch || (e.max_arch && arch > e.max_arch))
    return fail(CARM_ERR_UNSUPPORTED, "%s needs sm_%d%s; device %d (%s) is sm_%d", e.name, e.min_arch,
                e.max_arch ? (e.max_arch == e.min_arch ? "a exactly" : "..") : "+", params->device, d.name, arch);
  if (d.compiled_arch == 0)
    return fail(CARM_ERR_UNSUPPORTED, "this libcarm_bench has no machine code for sm_%d (%s): rebuild for that arch", arch, d.name);

  carm_launch l{};
  l.config = params->config == 3 && std::strcmp(e.kind, "compute") == 0 ? 3 : 2;  // mixed wgmma rows: 2 warpgroups
  l.seed = e.seed;
  l.block = e.smem_kind == 2 ? 128 * l.config : e.block;
  l.smem = e.smem_kind == 1 ? 8 * l.block * 16 : e.smem_kind == 2 ? carm_wgmma_smem_bytes(l.config)
         : e.smem_kind == 4 ? carm_bulk_smem_bytes() : e.smem_kind == 5 ? carm_mix_tma_smem_bytes() : 0;
  const void* kernel = nullptr;
  e.launch(l, nullptr, &kernel);
  if (l.smem > 48 * 1024) CARM_CUDA(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, l.smem));
  if (e.ws == WS_L1) CARM_CUDA(cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout, 0));
  int per_sm = 0;
  CARM_CUDA(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, l.block, l.smem));
  if (per_sm < 1) return fail(CARM_ERR_CUDA, "%s: no block of %d threads and %d bytes of shared memory fits an SM", e.name, l.block, l.smem);
  if (e.ws == WS_L1) per_sm = std::min(per_sm, 4);  // 4 slices of 16 KiB per SM by default
  l.grid = per_sm * d.sm_count;
  l.iterations = params->iterations > 0 ? params->iterations : e.default_iters;
  l.sentinel = -1.2345e30f;

  double ws_bytes = 0, items = 0;
  if (e.shape == SHAPE_STREAM) {
    ws_bytes = params->size_bytes > 0 ? params->size_bytes : default_ws(e, d);
    const double granule = (double)l.grid * l.block * e.unroll * 16.0;
    ws_bytes = std::floor(ws_bytes / granule) * granule;
    if (ws_bytes < granule) ws_bytes = granule;  // smallest working set: one step of every thread
    l.elems = (long long)(ws_bytes / 16);
    items = (double)l.elems * (double)l.iterations;
    for (int b = 0; b < e.buffers; ++b) {
      rc = ensure_buffer(*s, b, (size_t)ws_bytes);
      if (rc) return rc;
    }
    l.buf0 = s->buf[0];
    l.buf1 = e.buffers > 1 ? s->buf[1] : nullptr;
  } else if (e.shape == SHAPE_WRAP) {
    ws_bytes = params->size_bytes > 0 ? params->size_bytes : default_ws(e, d);
    ws_bytes = std::max(65536.0, std::exp2(std::floor(std::log2(ws_bytes))));  // the kernel wraps with a mask
    l.elems = (long long)(ws_bytes / 16);
    items = (double)l.grid * l.block * (double)l.iterations * e.unroll;
    rc = ensure_buffer(*s, 0, (size_t)ws_bytes);
    if (rc) return rc;
    l.buf0 = s->buf[0];
  } else {
    items = (double)l.grid * l.block * (double)l.iterations * e.items_per_thread_iter;
    ws_bytes = l.smem;
  }
  if (s->out_blocks < l.grid) {
    if (s->out) CARM_CUDA(cudaFree(s->out));
    s->out = nullptr;
    CARM_CUDA(cudaMalloc(&s->out, sizeof(float) * l.grid));
    s->out_blocks = l.grid;
  }
  l.out = s->out;

  const int launches = params->launches > 0 ? params->launches : 1;
  for (int w = 0; w < params->warmup_launches; ++w) CARM_CUDA(e.launch(l, s->stream, nullptr));
  CARM_CUDA(cudaEventRecord(s->start, s->stream));
  for (int r = 0; r < launches; ++r) CARM_CUDA(e.launch(l, s->stream, nullptr));
  CARM_CUDA(cudaEventRecord(s->stop, s->stream));
  CARM_CUDA(cudaEventSynchronize(s->stop));
  float ms = 0.f;
  CARM_CUDA(cudaEventElapsedTime(&ms, s->start, s->stop));
  float checksum = 0.f;
  CARM_CUDA(cudaMemcpy(&checksum, s->out, sizeof checksum, cudaMemcpyDeviceToHost));

  std::memset(out, 0, sizeof *out);
  out->work_items = items * launches;
  out->flops = out->work_items * e.flops_per_item;
  out->bytes = out->work_items * e.bytes_per_item;
  out->seconds = ms * 1e-3;
  out->checksum = checksum;
  out->size_bytes = ws_bytes;
  out->iterations = l.iterations;
  out->launches = launches;
  out->grid_blocks = l.grid;
  out->block_threads = l.block;
  out->dynamic_smem_bytes = l.smem;
  return CARM_OK;
}

int carm_release(void) {
  std::lock_guard<std::mutex> lock(g_mutex);
  for (auto& kv : g_devices) {
    device_state& s = kv.second;
    if (!s.ready) continue;
    cudaSetDevice(kv.first);
    for (int b = 0; b < 2; ++b) if (s.buf[b]) cudaFree(s.buf[b]);
    if (s.out) cudaFree(s.out);
    cudaEventDestroy(s.start);
    cudaEventDestroy(s.stop);
    cudaStreamDestroy(s.stream);
  }
  g_devices.clear();
  return CARM_OK;
}

const char* carm_last_error(void) { return g_error.c_str(); }

}  // extern "C"
