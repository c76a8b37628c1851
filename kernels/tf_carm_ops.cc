// TensorFlow custom op wrapping the C ABI of carm_bench.h (host only: the op calls carm_bench_run,
// which times its own CUDA launches). Load with tf.load_op_library(".../tf_carm_ops.so").
#include "carm_bench.h"

#include <string>

#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/shape_inference.h"

using namespace tensorflow;

REGISTER_OP("CarmBenchRun")
    .Input("index: int32")
    .Input("size_bytes: float64")
    .Input("iterations: int64")
    .Input("launches: int32")
    .Attr("device: int = 0")
    .Attr("warmup_launches: int = 1")
    .Output("flops: float64")
    .Output("bytes: float64")
    .Output("seconds: float64")
    .SetIsStateful()  // a measurement: never constant-folded or deduplicated
    .SetShapeFn([](shape_inference::InferenceContext* c) {
      for (int i = 0; i < 3; ++i) c->set_output(i, c->Scalar());
      return OkStatus();
    })
    .Doc("Runs CARM micro-benchmark `index` (see carm_bench_describe); returns total FLOPs, bytes, seconds.");

REGISTER_OP("CarmBenchCount").Output("count: int32").SetShapeFn([](shape_inference::InferenceContext* c) {
  c->set_output(0, c->Scalar());
  return OkStatus();
});

class CarmBenchRunOp : public OpKernel {
 public:
  explicit CarmBenchRunOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("device", &device_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("warmup_launches", &warmup_));
  }
  void Compute(OpKernelContext* ctx) override {
    carm_bench_params p{};
    p.device = device_;
    p.warmup_launches = warmup_;
    p.launches = ctx->input(3).scalar<int32>()();
    p.size_bytes = ctx->input(1).scalar<double>()();
    p.iterations = ctx->input(2).scalar<int64_t>()();
    carm_bench_result r{};
    const int rc = carm_bench_run(ctx->input(0).scalar<int32>()(), &p, &r);
    OP_REQUIRES(ctx, rc == CARM_OK,
                rc == CARM_ERR_NO_GPU ? errors::Unavailable(carm_last_error()) : errors::Internal(carm_last_error()));
    const double values[3] = {r.flops, r.bytes, r.seconds};
    for (int i = 0; i < 3; ++i) {
      Tensor* t = nullptr;
      OP_REQUIRES_OK(ctx, ctx->allocate_output(i, TensorShape({}), &t));
      t->scalar<double>()() = values[i];
    }
  }

 private:
  int device_ = 0, warmup_ = 1;
};

class CarmBenchCountOp : public OpKernel {
 public:
  explicit CarmBenchCountOp(OpKernelConstruction* ctx) : OpKernel(ctx) {}
  void Compute(OpKernelContext* ctx) override {
    Tensor* t = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape({}), &t));
    t->scalar<int32>()() = carm_bench_count();
  }
};

REGISTER_KERNEL_BUILDER(Name("CarmBenchRun").Device(DEVICE_CPU), CarmBenchRunOp);
REGISTER_KERNEL_BUILDER(Name("CarmBenchCount").Device(DEVICE_CPU), CarmBenchCountOp);
