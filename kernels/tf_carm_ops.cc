// TensorFlow custom ops wrapping the C ABI of carm_bench.h, one op per ABI function, so TensorFlow
// runs every benchmark with its full configuration and returns the same record as the ctypes binding
// (measure/kernels.py). Host ops: carm_bench_run times its own CUDA launches. The library links
// against libcarm_bench.so (the CUDA build, or the host-only kernels/host_fake.cc build for tests).
// Load with tf.load_op_library(".../tf_carm_ops.so"). An error carries carm_last_error() unchanged.
#include "carm_bench.h"

#include <string>

#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/shape_inference.h"

using namespace tensorflow;

namespace {

Status status_of(int rc) {
  const std::string msg = carm_last_error();
  switch (rc) {
    case CARM_OK: return OkStatus();
    case CARM_ERR_NO_GPU: return absl::UnavailableError(msg);
    case CARM_ERR_INVALID: return absl::InvalidArgumentError(msg);
    case CARM_ERR_UNSUPPORTED: return absl::UnimplementedError(msg);
    default: return absl::InternalError(msg);
  }
}

Status scalars(shape_inference::InferenceContext* c) {
  for (int i = 0; i < c->num_outputs(); ++i) c->set_output(i, c->Scalar());
  return OkStatus();
}

template <typename T>
void put(OpKernelContext* ctx, int i, const T& value) {
  Tensor* t = nullptr;
  OP_REQUIRES_OK(ctx, ctx->allocate_output(i, TensorShape({}), &t));
  t->scalar<T>()() = value;
}

}  // namespace

REGISTER_OP("CarmAbiVersion").Output("version: int32").SetShapeFn(scalars);
REGISTER_OP("CarmBenchCount").Output("count: int32").SetShapeFn(scalars);
REGISTER_OP("CarmDeviceCount").Output("count: int32").SetIsStateful().SetShapeFn(scalars);
REGISTER_OP("CarmRelease").SetIsStateful().SetShapeFn(scalars);

REGISTER_OP("CarmBenchDescribe")
    .Input("index: int32")
    .Output("name: string").Output("kind: string").Output("carm_key: string").Output("memory_key: string")
    .Output("variant: string").Output("instruction: string").Output("item: string")
    .Output("min_arch: int32").Output("max_arch: int32")
    .Output("flops_per_item: float64").Output("bytes_per_item: float64").Output("intensity_param: float64")
    .Output("size_is_bytes: bool")
    .SetShapeFn(scalars)
    .Doc("One row of the benchmark table (struct carm_bench_info).");

REGISTER_OP("CarmBenchRun")
    .Input("index: int32")
    .Input("size_bytes: float64")
    .Input("iterations: int64")
    .Input("launches: int32")
    .Attr("device: int = 0")
    .Attr("warmup_launches: int = 1")
    .Attr("config: int = 0")
    .Output("flops: float64")
    .Output("bytes: float64")
    .Output("seconds: float64")
    .Output("work_items: float64")
    .Output("checksum: float64")
    .Output("size_bytes_used: float64")
    .Output("iterations_used: int64")
    .Output("launches_used: int32")
    .Output("grid_blocks: int32")
    .Output("block_threads: int32")
    .Output("dynamic_smem_bytes: int32")
    .SetIsStateful()  // a measurement: never constant-folded or deduplicated
    .SetShapeFn(scalars)
    .Doc("Runs CARM micro-benchmark `index` with struct carm_bench_params; returns struct carm_bench_result.");

REGISTER_OP("CarmDeviceInfo")
    .Attr("device: int = 0")
    .Output("name: string")
    .Output("cc_major: int32").Output("cc_minor: int32").Output("sm_count: int32").Output("clock_khz: int32")
    .Output("memory_clock_khz: int32").Output("memory_bus_bits: int32").Output("l2_bytes: int64")
    .Output("smem_per_sm_bytes: int64").Output("smem_per_block_optin_bytes: int64").Output("global_mem_bytes: int64")
    .Output("max_threads_per_sm: int32").Output("regs_per_sm: int32").Output("compiled_arch: int32")
    .SetIsStateful()
    .SetShapeFn(scalars)
    .Doc("struct carm_device_info of `device`.");

class CarmAbiVersionOp : public OpKernel {
 public:
  using OpKernel::OpKernel;
  void Compute(OpKernelContext* ctx) override { put<int32>(ctx, 0, carm_abi_version()); }
};

class CarmBenchCountOp : public OpKernel {
 public:
  using OpKernel::OpKernel;
  void Compute(OpKernelContext* ctx) override { put<int32>(ctx, 0, carm_bench_count()); }
};

class CarmDeviceCountOp : public OpKernel {
 public:
  using OpKernel::OpKernel;
  void Compute(OpKernelContext* ctx) override {
    int n = 0;
    OP_REQUIRES_OK(ctx, status_of(carm_device_count(&n)));
    put<int32>(ctx, 0, n);
  }
};

class CarmReleaseOp : public OpKernel {
 public:
  using OpKernel::OpKernel;
  void Compute(OpKernelContext* ctx) override { OP_REQUIRES_OK(ctx, status_of(carm_release())); }
};

class CarmBenchDescribeOp : public OpKernel {
 public:
  using OpKernel::OpKernel;
  void Compute(OpKernelContext* ctx) override {
    carm_bench_info info{};
    OP_REQUIRES_OK(ctx, status_of(carm_bench_describe(ctx->input(0).scalar<int32>()(), &info)));
    const char* strings[] = {info.name, info.kind, info.carm_key, info.memory_key, info.variant, info.instruction, info.item};
    for (int i = 0; i < 7; ++i) put<tstring>(ctx, i, tstring(strings[i]));
    put<int32>(ctx, 7, info.min_arch);
    put<int32>(ctx, 8, info.max_arch);
    put<double>(ctx, 9, info.flops_per_item);
    put<double>(ctx, 10, info.bytes_per_item);
    put<double>(ctx, 11, info.intensity_param);
    put<bool>(ctx, 12, info.size_is_bytes != 0);
  }
};

class CarmBenchRunOp : public OpKernel {
 public:
  explicit CarmBenchRunOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("device", &device_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("warmup_launches", &warmup_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("config", &config_));
  }
  void Compute(OpKernelContext* ctx) override {
    carm_bench_params p{};
    p.device = device_;
    p.warmup_launches = warmup_;
    p.config = config_;
    p.launches = ctx->input(3).scalar<int32>()();
    p.size_bytes = ctx->input(1).scalar<double>()();
    p.iterations = ctx->input(2).scalar<int64_t>()();
    carm_bench_result r{};
    OP_REQUIRES_OK(ctx, status_of(carm_bench_run(ctx->input(0).scalar<int32>()(), &p, &r)));
    const double values[] = {r.flops, r.bytes, r.seconds, r.work_items, r.checksum, r.size_bytes};
    for (int i = 0; i < 6; ++i) put<double>(ctx, i, values[i]);
    put<int64_t>(ctx, 6, r.iterations);
    const int32 counts[] = {r.launches, r.grid_blocks, r.block_threads, r.dynamic_smem_bytes};
    for (int i = 0; i < 4; ++i) put<int32>(ctx, 7 + i, counts[i]);
  }

 private:
  int device_ = 0, warmup_ = 1, config_ = 0;
};

class CarmDeviceInfoOp : public OpKernel {
 public:
  explicit CarmDeviceInfoOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("device", &device_));
  }
  void Compute(OpKernelContext* ctx) override {
    struct carm_device_info d{};
    OP_REQUIRES_OK(ctx, status_of(carm_device_info(device_, &d)));
    put<tstring>(ctx, 0, tstring(d.name));
    const int32 small[] = {d.cc_major, d.cc_minor, d.sm_count, d.clock_khz, d.memory_clock_khz, d.memory_bus_bits};
    for (int i = 0; i < 6; ++i) put<int32>(ctx, 1 + i, small[i]);
    const int64_t sizes[] = {d.l2_bytes, d.smem_per_sm_bytes, d.smem_per_block_optin_bytes, d.global_mem_bytes};
    for (int i = 0; i < 4; ++i) put<int64_t>(ctx, 7 + i, sizes[i]);
    put<int32>(ctx, 11, d.max_threads_per_sm);
    put<int32>(ctx, 12, d.regs_per_sm);
    put<int32>(ctx, 13, d.compiled_arch);
  }

 private:
  int device_ = 0;
};

REGISTER_KERNEL_BUILDER(Name("CarmAbiVersion").Device(DEVICE_CPU), CarmAbiVersionOp);
REGISTER_KERNEL_BUILDER(Name("CarmBenchCount").Device(DEVICE_CPU), CarmBenchCountOp);
REGISTER_KERNEL_BUILDER(Name("CarmDeviceCount").Device(DEVICE_CPU), CarmDeviceCountOp);
REGISTER_KERNEL_BUILDER(Name("CarmRelease").Device(DEVICE_CPU), CarmReleaseOp);
REGISTER_KERNEL_BUILDER(Name("CarmBenchDescribe").Device(DEVICE_CPU), CarmBenchDescribeOp);
REGISTER_KERNEL_BUILDER(Name("CarmBenchRun").Device(DEVICE_CPU), CarmBenchRunOp);
REGISTER_KERNEL_BUILDER(Name("CarmDeviceInfo").Device(DEVICE_CPU), CarmDeviceInfoOp);
