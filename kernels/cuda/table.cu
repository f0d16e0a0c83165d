/* The CUDA kernel table: the zn_cuda_* ops of ops.h, whose signatures are the table's. */
extern "C" {
#include "kernels.h"
#include "ops.h"

extern const struct zn_kernel_table zn_kernels_cuda;
const struct zn_kernel_table zn_kernels_cuda = {
	"cuda",
	zn_cuda_encoder_forward,
	zn_cuda_encoder_backward,
	zn_cuda_layernorm_forward,
	zn_cuda_layernorm_backward,
	zn_cuda_matmul_forward,
	zn_cuda_matmul_backward,
	zn_cuda_attention_forward,
	zn_cuda_attention_backward,
	zn_cuda_gelu_forward,
	zn_cuda_gelu_backward,
	zn_cuda_residual_forward,
	zn_cuda_residual_backward,
	zn_cuda_crossentropy_forward,
	zn_cuda_crossentropy_backward,
	zn_cuda_cast_f32_to_bf16,
	zn_cuda_cast_bf16_to_f32,
	zn_cuda_scale,
	zn_cuda_adamw,
	zn_cuda_grad_sumsq,
	zn_cuda_embedding_forward,
	zn_cuda_embedding_backward,
	zn_cuda_rmsnorm_forward,
	zn_cuda_rmsnorm_backward,
	zn_cuda_rope_forward,
	zn_cuda_rope_backward,
	zn_cuda_swiglu_forward,
	zn_cuda_swiglu_backward,
	zn_cuda_gqa_attention_forward,
	zn_cuda_gqa_attention_backward,
	zn_cuda_flash_attention_forward,
	zn_cuda_flash_attention_backward,
	zn_cuda_cast_f32_to_f16,
	zn_cuda_cast_f16_to_f32,
	zn_cuda_matmul_forward_bf16,
	zn_cuda_matmul_backward_bf16,
	zn_cuda_encoder_forward_bf16,
	zn_cuda_embedding_forward_bf16,
	zn_cuda_flash_attention_tc_forward,
	zn_cuda_flash_attention_tc_backward,
	zn_cuda_cols_add,
	zn_cuda_cols_take,
	zn_cuda_dropout,
	zn_cuda_lora_up,
	zn_cuda_cols_take_bf16,
	zn_cuda_kv_attention_forward,
	zn_cuda_flash_attention_doc_forward,
	zn_cuda_flash_attention_doc_backward,
	zn_cuda_encoder_pos_forward,
	zn_cuda_encoder_pos_backward,
	zn_cuda_encoder_pos_forward_bf16,
};
}

/* positional initialisers: fail the build if the table gains a slot this list lacks */
static_assert(sizeof(struct zn_kernel_table) == 51 * sizeof(void *),
	      "zn_kernel_table changed: update kernels/cuda/table.cu");
