/* carm_bench.h: the one C ABI of the CARM micro-benchmarks (loaded with ctypes, wrapped by the
 * TensorFlow op). Every benchmark is a row of a table: what it measures (carm_key, memory_key), and
 * the FLOPs and bytes of ONE work item, so callers compute rates from the table, never by hand.
 *
 * Units: flops are floating-point (or integer) operations, 1 multiply-add = 2; bytes are the bytes the
 * SMs request at the level named by memory_key; seconds come from CUDA events.
 * All functions return 0 on success, a CARM_ERR_* code otherwise; carm_last_error() says why
 * (thread-local message). Nothing here calls exit().
 */
#ifndef CARM_BENCH_H
#define CARM_BENCH_H

#ifdef __cplusplus
extern "C" {
#endif

#define CARM_ABI_VERSION 1

enum carm_status {
  CARM_OK = 0,
  CARM_ERR_NO_GPU = 1,      /* no CUDA device, no driver, or driver too old */
  CARM_ERR_INVALID = 2,     /* bad index, bad parameter */
  CARM_ERR_UNSUPPORTED = 3, /* benchmark needs another architecture than the device's */
  CARM_ERR_CUDA = 4,        /* any other CUDA runtime error (launch, allocation, ...) */
};

struct carm_bench_info {
  char name[48];        /* unique, e.g. "tc_bf16_wgmma_rand" */
  char kind[16];        /* "compute" | "memory" | "mixed" */
  char carm_key[24];    /* roof measured: compute key for compute and mixed rows, level for memory rows */
  char memory_key[16];  /* memory level the bytes are counted at ("" for compute rows) */
  char variant[24];     /* "rand"/"zero", "read"/"write"/"copy", "partition"/"full", "c16", ... */
  char instruction[32]; /* the instruction that does the work, e.g. "wgmma.m64n256k16", "FFMA" */
  char item[64];        /* what one work item is, e.g. "one wgmma per warpgroup" */
  int min_arch;         /* 10*major+minor, e.g. 90 */
  int max_arch;         /* 0 = any newer; wgmma rows: 90 (sm_90a only) */
  double flops_per_item;
  double bytes_per_item;
  double intensity_param; /* mixed rows: compute iterations per loaded element; 0 otherwise */
  int size_is_bytes;      /* 1: params.size_bytes is the working set; 0: size is ignored */
};

struct carm_bench_params {
  int device;
  int warmup_launches;   /* untimed launches before the timed ones (first use pays module load) */
  int launches;          /* timed launches, >= 1 (0 = 1) */
  int config;            /* 0 = default; wgmma rows: warpgroups per CTA (2 or 3) */
  double size_bytes;     /* working set for memory and mixed rows; 0 = default from device attributes */
  long long iterations;  /* inner iterations (passes for memory rows); 0 = benchmark default */
};

struct carm_bench_result {
  double flops;        /* total over the timed launches */
  double bytes;        /* total over the timed launches */
  double seconds;      /* cudaEventElapsedTime over the timed launches */
  double work_items;   /* total work items; flops = work_items * flops_per_item */
  double checksum;     /* a value the kernel computed from its data (0 for zero-data Tensor Core rows) */
  double size_bytes;   /* working set actually used */
  long long iterations;/* inner iterations actually used */
  int launches;
  int grid_blocks;
  int block_threads;
  int dynamic_smem_bytes;
};

struct carm_device_info {
  char name[256];
  int cc_major, cc_minor;
  int sm_count;
  int clock_khz;             /* peak SM clock reported by the driver (0 if unknown) */
  int memory_clock_khz;
  int memory_bus_bits;
  long long l2_bytes;
  long long smem_per_sm_bytes;
  long long smem_per_block_optin_bytes;
  long long global_mem_bytes;
  int max_threads_per_sm;
  int regs_per_sm;
  int compiled_arch;         /* arch of the machine code the loaded library runs on this device (e.g. 90) */
};

int carm_abi_version(void);
int carm_bench_count(void);
int carm_bench_describe(int index, struct carm_bench_info* out);
int carm_bench_find(const char* name); /* index, or -1 */
int carm_bench_run(int index, const struct carm_bench_params* params, struct carm_bench_result* out);
int carm_device_count(int* count);
int carm_device_info(int device, struct carm_device_info* out);
int carm_release(void); /* frees cached device buffers */
const char* carm_last_error(void);

#ifdef __cplusplus
}
#endif
#endif
