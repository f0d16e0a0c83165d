/* Compact moments (adamw.h, "compact moments"): their byte layout, the argument checks of
 * zn_adamw_step_states and its scalar reference, which the SIMD passes (adamw.c for bf16,
 * adamw_q8.c for int8) are tested against: one element at a time through core/dtype.h and
 * cpu/q8.h, the update by adamw_ref.c's zn_adamw_ref_element.
 */
#include <errno.h>
#include <math.h>

#include "core/dtype.h"
#include <string.h>

#include "core/log.h"
#include "cpu/adamw_impl.h"
#include "cpu/q8.h"

const char *zn_optim_states_name(enum zn_optim_states s)
{
	switch (s) {
	case ZN_STATES_FP32:
		return "fp32";
	case ZN_STATES_BF16:
		return "bf16";
	case ZN_STATES_INT8:
		return "int8";
	}
	return "?";
}

int zn_optim_states_parse(const char *s, enum zn_optim_states *out)
{
	for (int k = ZN_STATES_FP32; k <= ZN_STATES_INT8; k++)
		if (!strcmp(s, zn_optim_states_name(k))) {
			*out = k;
			return 0;
		}
	return -1;
}

uint64_t zn_adamw_state_bytes(enum zn_optim_states s, uint64_t n)
{
	if (s == ZN_STATES_BF16)
		return 2 * n;
	if (s == ZN_STATES_INT8)
		return n + 4 * (uint64_t)zn_q8_blocks((size_t)n);
	return 4 * n;
}

void zn_adamw_moments_of(struct zn_adamw_moments *mo, enum zn_optim_states s, void *m_buf,
			 void *v_buf, uint64_t n)
{
	*mo = (struct zn_adamw_moments){ .states = s, .m = m_buf, .v = v_buf };
	if (s == ZN_STATES_INT8 && m_buf && v_buf) {
		/* n codes (a multiple of the block, so the floats are aligned), then absmax */
		mo->m_absmax = (float *)((uint8_t *)m_buf + n);
		mo->v_absmax = (float *)((uint8_t *)v_buf + n);
	}
}

void zn_adamw_moments_at(struct zn_adamw_moments *out, const struct zn_adamw_moments *mo,
			 uint64_t i)
{
	size_t es = mo->states == ZN_STATES_FP32 ? 4 : mo->states == ZN_STATES_BF16 ? 2 : 1;

	*out = *mo;
	out->m = (char *)mo->m + i * es;
	out->v = (char *)mo->v + i * es;
	if (mo->states == ZN_STATES_INT8) {
		out->m_absmax = mo->m_absmax + i / ZN_Q8_BLOCK;
		out->v_absmax = mo->v_absmax + i / ZN_Q8_BLOCK;
	}
}

double zn_adamw_states_bytes_per_param(enum zn_optim_states s, enum zn_dtype grad_dtype,
				       bool has_out, enum zn_dtype out_dtype)
{
	/* grad read + master read and written + m and v read and written + output written */
	double mv = (double)zn_adamw_state_bytes(s, ZN_Q8_BLOCK) / ZN_Q8_BLOCK;

	return (double)zn_dtype_size(grad_dtype) + 8.0 + 4.0 * mv +
	       (has_out ? (double)zn_dtype_size(out_dtype) : 0.0);
}

static int spans_check(const struct zn_adamw_span *spans, int span_count, size_t n)
{
	size_t next = 0;

	for (int s = 0; s < span_count; s++) {
		float wd = spans[s].weight_decay;

		if (spans[s].first != next) {
			zn_error("AdamW: span %d starts at %zu, not at %zu where the previous "
				 "ended: spans must tile [0, %zu) in order", s, spans[s].first, next,
				 n);
			return -EINVAL;
		}
		if (!(wd >= 0 && isfinite(wd))) {
			zn_error("AdamW: span %d: weight_decay must be finite and >= 0 (is %g)", s,
				 wd);
			return -EINVAL;
		}
		next += spans[s].count;
	}
	if (next != n) {
		zn_error("AdamW: the %d spans cover [0, %zu), the call has %zu elements",
			 span_count, next, n);
		return -EINVAL;
	}
	return 0;
}

int zn_adamw_states_check(const struct zn_adamw_params *p, const float *master,
			  const struct zn_adamw_moments *mo, const void *grad,
			  enum zn_dtype grad_dtype, const void *param_out, enum zn_dtype out_dtype,
			  size_t n, const struct zn_adamw_span *spans, int span_count)
{
	int rc;

	if (mo->states != ZN_STATES_FP32 && mo->states != ZN_STATES_BF16 &&
	    mo->states != ZN_STATES_INT8) {
		zn_error("AdamW: optimizer states %d are not fp32, bf16 or int8", (int)mo->states);
		return -EINVAL;
	}
	rc = zn_adamw_args_check(p, master, mo->m, mo->v, grad, grad_dtype, param_out, out_dtype,
				 n);
	if (!rc && n && mo->states == ZN_STATES_INT8 && (!mo->m_absmax || !mo->v_absmax)) {
		zn_error("AdamW: int8 moments without their block scales (m_absmax, v_absmax)");
		rc = -EINVAL;
	}
	if (!rc && span_count < 0) {
		zn_error("AdamW: span_count %d < 0", span_count);
		rc = -EINVAL;
	}
	return rc ? rc : spans_check(spans, span_count, n);
}

/* the per-call constants with span s's weight decay */
static void span_consts(struct zn_adamw_consts *k, const struct zn_adamw_params *p,
			const struct zn_adamw_span *span)
{
	struct zn_adamw_params q = *p;

	q.weight_decay = span->weight_decay;
	zn_adamw_consts_get(k, &q);
}

/* elements [first, first + len) of an int8 call, one block: widen, update, quantize */
static void ref_q8_block(const struct zn_adamw_params *p, float *master,
			 const struct zn_adamw_moments *mo, const void *grad, enum zn_dtype gt,
			 void *out, enum zn_dtype ot, size_t first, size_t len,
			 const struct zn_adamw_span *spans, int *span)
{
	size_t b = first / ZN_Q8_BLOCK;
	uint8_t *mq = (uint8_t *)mo->m + first, *vq = (uint8_t *)mo->v + first;
	float m[ZN_Q8_BLOCK], v[ZN_Q8_BLOCK];
	struct zn_adamw_consts k;

	zn_q8_dequantize(m, mq, mo->m_absmax + b, len, true);
	zn_q8_dequantize(v, vq, mo->v_absmax + b, len, false);
	for (size_t j = 0; j < len; j++) {
		size_t i = first + j;
		float g = zn_adamw_ref_load(grad, gt, i);

		while (i >= spans[*span].first + spans[*span].count)
			(*span)++;
		span_consts(&k, p, &spans[*span]);
		if (isfinite(g)) {
			zn_adamw_ref_element(&k, g, &master[i], &m[j], &v[j]);
		} else {
			/* bitsandbytes: the element's state is reset, its weight kept */
			m[j] = 0.0f;
			v[j] = 0.0f;
		}
		if (out)
			zn_adamw_ref_store(out, ot, i, master[i]);
	}
	zn_q8_quantize(mq, mo->m_absmax + b, m, len, true);
	zn_q8_quantize(vq, mo->v_absmax + b, v, len, false);
	/* the rest of the last block: zero (padding) */
	for (size_t j = len; j < ZN_Q8_BLOCK; j++) {
		mq[j] = ZN_Q8_ZERO_SIGNED;
		vq[j] = ZN_Q8_ZERO_UNSIGNED;
	}
}

static void ref_bf16(const struct zn_adamw_params *p, float *master,
		     const struct zn_adamw_moments *mo, const void *grad, enum zn_dtype gt,
		     void *out, enum zn_dtype ot, size_t n, const struct zn_adamw_span *spans)
{
	uint16_t *mh = mo->m, *vh = mo->v;
	struct zn_adamw_consts k;
	int span = 0;

	span_consts(&k, p, &spans[0]);
	for (size_t i = 0; i < n; i++) {
		float m = zn_bf16_to_f32(mh[i]), v = zn_bf16_to_f32(vh[i]);

		while (i >= spans[span].first + spans[span].count)
			span_consts(&k, p, &spans[++span]);
		zn_adamw_ref_element(&k, zn_adamw_ref_load(grad, gt, i), &master[i], &m, &v);
		mh[i] = zn_f32_to_bf16(m);
		vh[i] = zn_f32_to_bf16(v);
		if (out)
			zn_adamw_ref_store(out, ot, i, master[i]);
	}
}

int zn_adamw_step_states_ref(const struct zn_adamw_params *p, float *master,
			     const struct zn_adamw_moments *mo, const void *grad,
			     enum zn_dtype grad_dtype, void *param_out, enum zn_dtype out_dtype,
			     size_t n, const struct zn_adamw_span *spans, int span_count)
{
	int rc = zn_adamw_states_check(p, master, mo, grad, grad_dtype, param_out, out_dtype, n,
				       spans, span_count);
	int span = 0;

	if (rc || n == 0)
		return rc;
	if (mo->states == ZN_STATES_BF16) {
		ref_bf16(p, master, mo, grad, grad_dtype, param_out, out_dtype, n, spans);
		return 0;
	}
	if (mo->states == ZN_STATES_INT8) {
		for (size_t first = 0; first < n; first += ZN_Q8_BLOCK)
			ref_q8_block(p, master, mo, grad, grad_dtype, param_out, out_dtype, first,
				     n - first < ZN_Q8_BLOCK ? n - first : ZN_Q8_BLOCK, spans,
				     &span);
		return 0;
	}
	for (int s = 0; !rc && s < span_count; s++) {
		struct zn_adamw_params q = *p;
		size_t i = spans[s].first;

		q.weight_decay = spans[s].weight_decay;
		rc = zn_adamw_step_ref(&q, master + i, (float *)mo->m + i, (float *)mo->v + i,
				       (const char *)grad + i * zn_dtype_size(grad_dtype),
				       grad_dtype, param_out ? (char *)param_out +
				       i * zn_dtype_size(out_dtype) : NULL, out_dtype, spans[s].count);
	}
	return rc;
}
