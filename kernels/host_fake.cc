// host_fake.cc: a host-only implementation of the carm_bench.h C ABI, for machines without a GPU.
// Compiled with the system C++ compiler instead of the CUDA sources, it lets both Python bindings
// (ctypes and the TensorFlow op, which links against this file's library) be tested the same way:
// a small fixed table and figures computed from the call's configuration by the formulas below, so a
// test can compute every field by hand. It also remembers the last carm_bench_run call
// (carm_host_fake_last_run), so a test can see which arguments reached the C ABI.
//
// Figures of one run (index i, row r, params p):
//   launches = p.launches or 1; iterations = p.iterations or 1000
//   size_bytes = p.size_bytes or 1 MiB for rows with size_is_bytes, else 0
//   work_items = launches * (size_is_bytes ? iterations * size_bytes / r.bytes_per_item : iterations * 1024)
//   flops = work_items * r.flops_per_item; bytes = work_items * r.bytes_per_item
//   seconds = work_items * (i + 1) * 1e-9
//   checksum = p.warmup_launches + 0.5 * p.config
//   grid_blocks = 4 * (p.config + 1); block_threads = 256; dynamic_smem_bytes = 1024 * p.config
// Device 0 is the only device; any other answers CARM_ERR_NO_GPU.
#include "carm_bench.h"

#include <cstdarg>
#include <cstdio>
#include <cstring>

namespace {

const carm_bench_info kTable[] = {
    {"fp32_fma", "compute", "fp32", "", "chains", "FFMA", "one FMA per thread", 80, 0, 2.0, 0.0, 0.0, 0},
    {"hbm_read", "memory", "hbm", "hbm", "read", "LDG.E.128", "one 16-byte load per thread", 80, 0, 0.0, 16.0, 0.0, 1},
    {"mix_fp32_hbm_c8", "mixed", "fp32", "hbm", "c8", "FFMA", "one float4 load and 32 FMAs", 80, 0, 64.0, 16.0, 8.0, 1},
};
const int kCount = sizeof(kTable) / sizeof(kTable[0]);

thread_local char g_error[256] = "";
int g_runs = 0;
int g_last_index = -1;
carm_bench_params g_last_params{};

int fail(int code, const char* fmt, ...) {
  va_list args;
  va_start(args, fmt);
  std::vsnprintf(g_error, sizeof(g_error), fmt, args);
  va_end(args);
  return code;
}

int check_index(int index) {
  if (index < 0 || index >= kCount)
    return fail(CARM_ERR_INVALID, "benchmark index %d out of range: expected 0..%d", index, kCount - 1);
  return CARM_OK;
}

int check_device(int device) {
  if (device != 0)
    return fail(CARM_ERR_NO_GPU, "no usable NVIDIA GPU %d: the host-only build has one fake device (0)", device);
  return CARM_OK;
}

}  // namespace

extern "C" {

int carm_abi_version(void) { return CARM_ABI_VERSION; }
int carm_bench_count(void) { return kCount; }

int carm_bench_find(const char* name) {
  for (int i = 0; name && i < kCount; ++i)
    if (std::strcmp(kTable[i].name, name) == 0) return i;
  return -1;
}

int carm_bench_describe(int index, struct carm_bench_info* out) {
  if (int rc = check_index(index)) return rc;
  if (!out) return fail(CARM_ERR_INVALID, "carm_bench_describe: out is NULL");
  *out = kTable[index];
  return CARM_OK;
}

int carm_bench_run(int index, const struct carm_bench_params* params, struct carm_bench_result* out) {
  if (int rc = check_index(index)) return rc;
  if (!params || !out) return fail(CARM_ERR_INVALID, "carm_bench_run: params and out must not be NULL");
  if (int rc = check_device(params->device)) return rc;
  ++g_runs;
  g_last_index = index;
  g_last_params = *params;
  const carm_bench_info& r = kTable[index];
  const int launches = params->launches > 0 ? params->launches : 1;
  const long long iterations = params->iterations > 0 ? params->iterations : 1000;
  const double size = r.size_is_bytes ? (params->size_bytes > 0 ? params->size_bytes : 1048576.0) : 0.0;
  const double items = launches * (r.size_is_bytes ? iterations * size / r.bytes_per_item : iterations * 1024.0);
  *out = carm_bench_result{};
  out->flops = items * r.flops_per_item;
  out->bytes = items * r.bytes_per_item;
  out->seconds = items * (index + 1) * 1e-9;
  out->work_items = items;
  out->checksum = params->warmup_launches + 0.5 * params->config;
  out->size_bytes = size;
  out->iterations = iterations;
  out->launches = launches;
  out->grid_blocks = 4 * (params->config + 1);
  out->block_threads = 256;
  out->dynamic_smem_bytes = 1024 * params->config;
  return CARM_OK;
}

int carm_device_count(int* count) {
  if (!count) return fail(CARM_ERR_INVALID, "carm_device_count: count is NULL");
  *count = 1;
  return CARM_OK;
}

int carm_device_info(int device, struct carm_device_info* out) {
  if (int rc = check_device(device)) return rc;
  if (!out) return fail(CARM_ERR_INVALID, "carm_device_info: out is NULL");
  *out = (struct carm_device_info){};
  std::snprintf(out->name, sizeof(out->name), "CARM host fake");
  out->cc_major = 9;
  out->cc_minor = 0;
  out->sm_count = 4;
  out->clock_khz = 1000000;
  out->memory_clock_khz = 2000000;
  out->memory_bus_bits = 1024;
  out->l2_bytes = 1LL << 20;
  out->smem_per_sm_bytes = 228LL * 1024;
  out->smem_per_block_optin_bytes = 227LL * 1024;
  out->global_mem_bytes = 1LL << 30;
  out->max_threads_per_sm = 2048;
  out->regs_per_sm = 65536;
  out->compiled_arch = 0;
  return CARM_OK;
}

int carm_release(void) { return CARM_OK; }
const char* carm_last_error(void) { return g_error; }

// Not in carm_bench.h: for tests only. The number of runs so far and the last run's index and params.
int carm_host_fake_last_run(int* runs, int* index, struct carm_bench_params* params) {
  if (!runs || !index || !params) return fail(CARM_ERR_INVALID, "carm_host_fake_last_run: NULL argument");
  *runs = g_runs;
  *index = g_last_index;
  *params = g_last_params;
  return CARM_OK;
}

}  // extern "C"
