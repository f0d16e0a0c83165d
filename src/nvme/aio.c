/* The engine's front: configuration, the request queue, splitting requests into pieces,
 * the rate cap, fault injection and completion accounting. The backends (aio_uring.c,
 * aio_pool.c) only move pieces; everything they share lives here.
 */
#include "nvme/aio_impl.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "core/env.h"
#include "core/log.h"

uint64_t zn_aio_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* ---- rate cap ---------------------------------------------------------------------- */

void zn_aio_cap_init(struct zn_aio_cap *c, uint64_t rate_bytes_per_s, uint64_t burst_ns)
{
	c->rate_bytes_per_s = rate_bytes_per_s;
	c->burst_ns = burst_ns;
	c->tat_ns = 0;
}

/* floor(bytes * 1e9 / rate) without a 128-bit type (ISO C has none): bytes * 1e9
 * overflows 64 bits above 18 GB, so the remainder is divided in three base-1000 digits
 * (exact while rate < 1.8e16 bytes/s). */
static uint64_t mul_div_1e9(uint64_t bytes, uint64_t rate)
{
	uint64_t q = bytes / rate, x = bytes % rate, frac = 0;

	for (int i = 0; i < 3; i++) {
		x *= 1000;
		frac = frac * 1000 + x / rate;
		x %= rate;
	}
	return q * 1000000000u + frac;
}

uint64_t zn_aio_cap_take(struct zn_aio_cap *c, uint64_t bytes, uint64_t now_ns)
{
	uint64_t cost_ns, burst_ns;

	if (!c->rate_bytes_per_s)
		return 0;
	cost_ns = mul_div_1e9(bytes, c->rate_bytes_per_s);
	/* A piece larger than the burst must still be able to go once the bucket is empty. */
	burst_ns = c->burst_ns > cost_ns ? c->burst_ns : cost_ns;
	if (c->tat_ns < now_ns)
		c->tat_ns = now_ns;
	if (c->tat_ns + cost_ns > now_ns + burst_ns)
		return c->tat_ns + cost_ns - now_ns - burst_ns;
	c->tat_ns += cost_ns;
	return 0;
}

/* ---- configuration ----------------------------------------------------------------- */

static int check_config(const struct zn_aio_config *cfg)
{
	if (!cfg->block_size_bytes || cfg->block_size_bytes % ZN_AIO_ALIGN ||
	    cfg->block_size_bytes > ZN_AIO_MAX_BLOCK_BYTES) {
		zn_error("aio.block_size is %" PRIu64 ": use a multiple of 4096 between 4K and 256M",
			 cfg->block_size_bytes);
		return -EINVAL;
	}
	if (cfg->queue_depth < 1 || cfg->queue_depth > 4096) {
		zn_error("aio.queue_depth is %d: use 1 to 4096", cfg->queue_depth);
		return -EINVAL;
	}
	if (cfg->intra_op_parallelism < 1 || cfg->intra_op_parallelism > ZN_AIO_MAX_RINGS) {
		zn_error("aio.intra_op_parallelism is %d: use 1 to %d", cfg->intra_op_parallelism,
			 ZN_AIO_MAX_RINGS);
		return -EINVAL;
	}
	return 0;
}

static int backend_from_env(enum zn_aio_backend *b)
{
	const char *s = zn_env_value(ZN_ENV_AIO_BACKEND);

	if (!s || !*s || !strcasecmp(s, "auto"))
		return 0;
	if (!strcasecmp(s, "uring") || !strcasecmp(s, "io_uring")) {
		*b = ZN_AIO_BACKEND_URING;
		return 0;
	}
	if (!strcasecmp(s, "pool")) {
		*b = ZN_AIO_BACKEND_POOL;
		return 0;
	}
	zn_error("ZINC_AIO_BACKEND is '%s': use auto, uring or pool", s);
	return -EINVAL;
}

static void describe(struct zn_aio *aio)
{
	if (aio->ops == &zn_aio_uring_ops)
		snprintf(aio->desc, sizeof(aio->desc), "io_uring, %d ring%s, %s buffers, %s files",
			 aio->cfg.intra_op_parallelism, aio->cfg.intra_op_parallelism > 1 ? "s" : "",
			 aio->fixed_buffers ? "fixed" : "plain",
			 aio->fixed_files ? "fixed" : "plain");
	else
		snprintf(aio->desc, sizeof(aio->desc), "pread/pwrite pool%s%s%s",
			 aio->fallback_reason[0] ? " (" : "", aio->fallback_reason,
			 aio->fallback_reason[0] ? ")" : "");
}

static int start_backend(struct zn_aio *aio, enum zn_aio_backend want)
{
	static atomic_bool fallback_logged;
	int rc;

	if (want != ZN_AIO_BACKEND_POOL) {
		aio->ops = &zn_aio_uring_ops;
		rc = aio->ops->start(aio);
		if (!rc)
			return 0;
		aio->ops->stop(aio);
		aio->stopping = false;
		if (want == ZN_AIO_BACKEND_URING) {
			zn_error("io_uring is unavailable (%s) and it was asked for: use "
				 "ZINC_AIO_BACKEND=auto or pool for the pread/pwrite pool",
				 rc == -ENOTSUP ? "running under valgrind" : zn_strerror(rc));
			aio->ops = NULL;
			return -ENOSYS;
		}
		snprintf(aio->fallback_reason, sizeof(aio->fallback_reason),
			 "io_uring unavailable: %s", rc == -ENOTSUP ? "running under valgrind" :
			 zn_strerror(rc));
		if (!atomic_exchange(&fallback_logged, true))
			zn_warn("io_uring is unavailable (%s): using a pread/pwrite thread pool",
				rc == -ENOTSUP ? "running under valgrind" : zn_strerror(rc));
	} else {
		snprintf(aio->fallback_reason, sizeof(aio->fallback_reason), "forced");
	}
	aio->fixed_buffers = false;
	aio->fixed_files = false;
	aio->ops = &zn_aio_pool_ops;
	return aio->ops->start(aio);
}

int zn_aio_create_backend(struct zn_aio **out, const struct zn_aio_config *cfg,
			  enum zn_aio_backend backend)
{
	struct zn_aio *aio;
	int rc;

	*out = NULL;
	rc = check_config(cfg);
	if (rc)
		return rc;
	if (backend == ZN_AIO_BACKEND_AUTO) {
		rc = backend_from_env(&backend);
		if (rc)
			return rc;
	}
	aio = calloc(1, sizeof(*aio));
	if (!aio)
		return -ENOMEM;
	aio->cfg = *cfg;
	if (pthread_mutex_init(&aio->lock, NULL))
		goto free_aio;
	if (pthread_cond_init(&aio->done_cv, NULL))
		goto destroy_lock;
	if (pthread_cond_init(&aio->work_cv, NULL))
		goto destroy_done_cv;
	aio->lock_ok = true;
	/* 10 ms of burst: enough to keep a queue full, small enough that a short benchmark
	 * run still sees the cap. */
	zn_aio_cap_init(&aio->cap[ZN_AIO_READ], cfg->bandwidth_cap_bytes_per_s, 10000000);
	zn_aio_cap_init(&aio->cap[ZN_AIO_WRITE], cfg->bandwidth_cap_bytes_per_s, 10000000);
	rc = start_backend(aio, backend);
	if (rc) {
		zn_aio_destroy(aio);
		return rc;
	}
	describe(aio);
	zn_debug("aio engine: %s, block %" PRIu64 ", depth %d", aio->desc, cfg->block_size_bytes,
		 cfg->queue_depth);
	*out = aio;
	return 0;

destroy_done_cv:
	pthread_cond_destroy(&aio->done_cv);
destroy_lock:
	pthread_mutex_destroy(&aio->lock);
free_aio:
	free(aio);
	return -ENOMEM;
}

int zn_aio_create(struct zn_aio **out, const struct zn_aio_config *cfg)
{
	return zn_aio_create_backend(out, cfg, ZN_AIO_BACKEND_AUTO);
}

/* Fails every queued request that has not been fully handed out (lock held). */
static bool cancel_queued_locked(struct zn_aio *aio)
{
	struct zn_aio_req *req, *next;
	bool any = false;

	for (req = aio->head; req; req = next) {
		next = req->next;
		if (!req->err)
			req->err = -ECANCELED;
		req->issued_bytes = req->io.bytes;
		if (!req->pieces_inflight) {
			__atomic_store_n(&req->done, 1, __ATOMIC_RELEASE);
			any = true;
		}
	}
	aio->head = aio->tail = NULL;
	return any;
}

void zn_aio_destroy(struct zn_aio *aio)
{
	if (!aio)
		return;
	if (aio->lock_ok) {
		pthread_mutex_lock(&aio->lock);
		aio->stopping = true;
		if (cancel_queued_locked(aio))
			zn_warn("aio engine destroyed with requests queued: they failed with ECANCELED");
		pthread_cond_broadcast(&aio->done_cv);
		pthread_mutex_unlock(&aio->lock);
	}
	if (aio->ops)
		aio->ops->stop(aio);
	if (aio->lock_ok) {
		pthread_cond_destroy(&aio->work_cv);
		pthread_cond_destroy(&aio->done_cv);
		pthread_mutex_destroy(&aio->lock);
	}
	free(aio);
}

const char *zn_aio_describe(const struct zn_aio *aio)
{
	return aio->desc;
}

bool zn_aio_is_uring(const struct zn_aio *aio)
{
	return aio->ops == &zn_aio_uring_ops;
}

bool zn_aio_fixed_buffers(const struct zn_aio *aio)
{
	return aio->fixed_buffers;
}

bool zn_aio_fixed_files(const struct zn_aio *aio)
{
	return aio->fixed_files;
}

uint64_t zn_aio_pieces_issued(struct zn_aio *aio)
{
	return atomic_load(&aio->seq);
}

void zn_aio_get_stats(struct zn_aio *aio, struct zn_aio_stats *out)
{
	out->pieces = atomic_load(&aio->seq);
	out->fixed_buffer_pieces = atomic_load(&aio->fixed_buffer_pieces);
	out->resubmits = atomic_load(&aio->resubmits);
	pthread_mutex_lock(&aio->lock);
	out->bytes_read = aio->bytes_done[ZN_AIO_READ];
	out->bytes_written = aio->bytes_done[ZN_AIO_WRITE];
	out->bytes_write_submitted = aio->bytes_submitted[ZN_AIO_WRITE];
	out->failed_requests = aio->failed_requests;
	pthread_mutex_unlock(&aio->lock);
}

/* ---- files and buffers ------------------------------------------------------------- */

int zn_aio_file_add(struct zn_aio *aio, int fd, const char *name, struct zn_aio_file **out)
{
	struct zn_aio_file *f;
	int rc;

	*out = NULL;
	if (fd < 0) {
		zn_error("zn_aio_file_add: bad descriptor %d for %s", fd, name ? name : "(unnamed)");
		return -EBADF;
	}
	f = calloc(1, sizeof(*f));
	if (!f)
		return -ENOMEM;
	f->fd = fd;
	f->fixed_index = -1;
	snprintf(f->name, sizeof(f->name), "%s", name ? name : "(unnamed)");
	pthread_mutex_lock(&aio->lock);
	rc = aio->ops->file_add(aio, f);
	pthread_mutex_unlock(&aio->lock);
	if (rc) {
		free(f);
		return rc;
	}
	*out = f;
	return 0;
}

void zn_aio_file_remove(struct zn_aio *aio, struct zn_aio_file *f)
{
	if (!f)
		return;
	pthread_mutex_lock(&aio->lock);
	aio->ops->file_remove(aio, f);
	pthread_mutex_unlock(&aio->lock);
	free(f);
}

const char *zn_aio_file_name(const struct zn_aio_file *f)
{
	return f->name;
}

static bool aligned(uint64_t v)
{
	return v % ZN_AIO_ALIGN == 0;
}

int zn_aio_register_buffer(struct zn_aio *aio, void *ptr, uint64_t bytes)
{
	struct zn_aio_region *r;
	int rc = 0;

	if (!aligned((uintptr_t)ptr) || !aligned(bytes) || !bytes) {
		zn_error("zn_aio_register_buffer: %p + %" PRIu64 " bytes is not 4 KiB aligned", ptr,
			 bytes);
		return -EINVAL;
	}
	pthread_mutex_lock(&aio->lock);
	if (aio->region_count == ZN_AIO_MAX_REGIONS) {
		zn_error("zn_aio_register_buffer: more than %d regions: register one large one",
			 ZN_AIO_MAX_REGIONS);
		rc = -ENOSPC;
		goto unlock;
	}
	r = &aio->regions[aio->region_count];
	r->base = ptr;
	r->bytes = bytes;
	r->first_index = -1;
	r->index_count = 0;
	aio->ops->buffer_add(aio, r);
	aio->region_count++;
unlock:
	pthread_mutex_unlock(&aio->lock);
	return rc;
}

void zn_aio_unregister_buffer(struct zn_aio *aio, void *ptr)
{
	int i;

	pthread_mutex_lock(&aio->lock);
	for (i = 0; i < aio->region_count; i++) {
		if (aio->regions[i].base != ptr)
			continue;
		aio->ops->buffer_remove(aio, &aio->regions[i]);
		aio->regions[i] = aio->regions[--aio->region_count];
		break;
	}
	pthread_mutex_unlock(&aio->lock);
}

/* Fixed-buffer slot for [mem, mem + *len), shortening *len so the piece stays inside one
 * registered 1 GiB buffer; -1 when mem is not in a fixed region (lock held). */
static int lookup_buffer_locked(struct zn_aio *aio, char *mem, uint64_t *len)
{
	uint64_t rel, room;
	int i;

	for (i = 0; i < aio->region_count; i++) {
		struct zn_aio_region *r = &aio->regions[i];

		if (r->first_index < 0 || mem < r->base || mem >= r->base + r->bytes)
			continue;
		rel = (uint64_t)(mem - r->base);
		room = ZN_AIO_BUF_CHUNK_BYTES - rel % ZN_AIO_BUF_CHUNK_BYTES;
		if (room > r->bytes - rel)
			room = r->bytes - rel;
		if (*len > room)
			*len = room;
		return r->first_index + (int)(rel / ZN_AIO_BUF_CHUNK_BYTES);
	}
	return -1;
}

/* ---- submission and completion ----------------------------------------------------- */

static int check_io(const struct zn_aio_io *io)
{
	const char *name = io->file ? io->file->name : "(no file)";
	const char *what = NULL;
	uint64_t v = 0;

	if (io->prio != ZN_AIO_PRIO_NORMAL && io->prio != ZN_AIO_PRIO_BACKGROUND) {
		zn_error("zn_aio_submit: prio %d: use ZN_AIO_PRIO_NORMAL or ZN_AIO_PRIO_BACKGROUND",
			 (int)io->prio);
		return -EINVAL;
	}
	if (!io->file || (io->op != ZN_AIO_READ && io->op != ZN_AIO_WRITE)) {
		zn_error("zn_aio_submit: %s", io->file ? "op must be ZN_AIO_READ or ZN_AIO_WRITE" :
			 "no file: add the descriptor with zn_aio_file_add()");
		return -EINVAL;
	}
	if (!aligned(io->offset))
		what = "offset", v = io->offset;
	else if (!aligned(io->bytes))
		what = "size", v = io->bytes;
	else if (!aligned((uintptr_t)io->buf_h))
		what = "buffer address", v = (uintptr_t)io->buf_h;
	else if (!aligned(io->map_unit_bytes) || !aligned(io->map_stride_bytes) ||
		 io->map_bias_bytes % (int64_t)ZN_AIO_ALIGN)
		what = "buffer map", v = io->map_unit_bytes;
	if (what) {
		zn_error("%s of %s: %s %#" PRIx64 " is not a multiple of 4096 (O_DIRECT needs "
			 "4 KiB-aligned buffers, offsets and sizes)",
			 io->op == ZN_AIO_READ ? "read" : "write", name, what, v);
		return -EINVAL;
	}
	return 0;
}

int zn_aio_submit(struct zn_aio *aio, const struct zn_aio_io *io, struct zn_aio_req *req)
{
	int rc;

	memset(req, 0, sizeof(*req));
	req->aio = aio;
	req->io = *io;
	rc = check_io(io);
	if (rc) {
		req->err = rc;
		req->done = 1;
		return rc;
	}
	if (!io->bytes) {
		req->done = 1;
		return 0;
	}
	pthread_mutex_lock(&aio->lock);
	if (aio->stopping) {
		pthread_mutex_unlock(&aio->lock);
		req->err = -ECANCELED;
		req->done = 1;
		return -ECANCELED;
	}
	if (aio->tail)
		aio->tail->next = req;
	else
		aio->head = req;
	aio->tail = req;
	aio->bytes_submitted[io->op] += io->bytes;
	aio->ops->wake_locked(aio);
	pthread_mutex_unlock(&aio->lock);
	return 0;
}

void zn_aio_promote(struct zn_aio_req *req)
{
	struct zn_aio *aio = req->aio;

	if (!aio || __atomic_load_n(&req->done, __ATOMIC_ACQUIRE))
		return;
	pthread_mutex_lock(&aio->lock);
	req->io.prio = ZN_AIO_PRIO_NORMAL;
	pthread_mutex_unlock(&aio->lock);
}

void zn_aio_set_bandwidth_cap(struct zn_aio *aio, uint64_t bytes_per_s)
{
	pthread_mutex_lock(&aio->lock);
	aio->cfg.bandwidth_cap_bytes_per_s = bytes_per_s;
	zn_aio_cap_init(&aio->cap[ZN_AIO_READ], bytes_per_s, 10000000);
	zn_aio_cap_init(&aio->cap[ZN_AIO_WRITE], bytes_per_s, 10000000);
	pthread_mutex_unlock(&aio->lock);
}

void zn_aio_set_write_cap(struct zn_aio *aio, uint64_t bytes_per_s)
{
	pthread_mutex_lock(&aio->lock);
	zn_aio_cap_init(&aio->cap[ZN_AIO_WRITE], bytes_per_s, 10000000);
	pthread_mutex_unlock(&aio->lock);
}

void zn_aio_set_timing(struct zn_aio *aio, bool on)
{
	atomic_store(&aio->timing, on);
}

int zn_aio_read(struct zn_aio *aio, struct zn_aio_file *f, uint64_t offset, uint64_t bytes,
		void *buf_h, struct zn_aio_req *req)
{
	struct zn_aio_io io = {
		.op = ZN_AIO_READ, .file = f, .offset = offset, .bytes = bytes, .buf_h = buf_h,
	};

	return zn_aio_submit(aio, &io, req);
}

int zn_aio_write(struct zn_aio *aio, struct zn_aio_file *f, uint64_t offset, uint64_t bytes,
		 const void *buf_h, struct zn_aio_req *req)
{
	struct zn_aio_io io = {
		.op = ZN_AIO_WRITE, .file = f, .offset = offset, .bytes = bytes,
		.buf_h = (void *)buf_h,
	};

	return zn_aio_submit(aio, &io, req);
}

int zn_aio_poll(struct zn_aio_req *req)
{
	if (!__atomic_load_n(&req->done, __ATOMIC_ACQUIRE))
		return -EINPROGRESS;
	return req->err;
}

int zn_aio_wait(struct zn_aio_req *req)
{
	struct zn_aio *aio = req->aio;

	if (__atomic_load_n(&req->done, __ATOMIC_ACQUIRE))
		return req->err;
	pthread_mutex_lock(&aio->lock);
	while (!req->done)
		pthread_cond_wait(&aio->done_cv, &aio->lock);
	pthread_mutex_unlock(&aio->lock);
	return req->err;
}

const char *zn_aio_req_strerror(const struct zn_aio_req *req, char *buf, size_t n)
{
	snprintf(buf, n, "%s of %s at offset %" PRIu64 ": %s",
		 req->io.op == ZN_AIO_READ ? "read" : "write",
		 req->io.file ? req->io.file->name : "(no file)", req->err_offset,
		 req->err == -ENODATA ? "end of file (the file is shorter than the request)" :
		 zn_strerror(req->err));
	return buf;
}

/* Address of file byte f of the request (see struct zn_aio_io). The offset is summed as
 * an integer first: bias alone may point far outside the buffer. */
static char *map_addr(const struct zn_aio_io *io, uint64_t f)
{
	int64_t off;

	if (!io->map_unit_bytes)
		return (char *)io->buf_h + (f - io->offset);
	off = io->map_bias_bytes +
	      (int64_t)((f / io->map_unit_bytes) * io->map_stride_bytes + f % io->map_unit_bytes);
	return (char *)io->buf_h + off;
}

/* Removes req from the queue, wherever it is (lock held). */
static void unlink_locked(struct zn_aio *aio, struct zn_aio_req *req)
{
	struct zn_aio_req *prev = NULL, *q = aio->head;

	while (q && q != req) {
		prev = q;
		q = q->next;
	}
	if (!q)
		return;
	if (prev)
		prev->next = req->next;
	else
		aio->head = req->next;
	if (aio->tail == req)
		aio->tail = prev;
	req->next = NULL;
}

/* The next piece of req: its length and memory; 0 when the rate cap holds it back for
 * *wait_ns (lock held). */
static uint64_t next_piece_locked(struct zn_aio *aio, struct zn_aio_req *req, char **mem,
				  int *buf_index, uint64_t *wait_ns)
{
	const struct zn_aio_io *io = &req->io;
	uint64_t pos = io->offset + req->issued_bytes, len = io->bytes - req->issued_bytes, room;

	*wait_ns = 0;
	if (len > aio->cfg.block_size_bytes)
		len = aio->cfg.block_size_bytes;
	if (io->map_unit_bytes) {
		room = io->map_unit_bytes - pos % io->map_unit_bytes;
		if (len > room)
			len = room;
	}
	*mem = map_addr(io, pos);
	*buf_index = lookup_buffer_locked(aio, *mem, &len);
	if (aio->cap[io->op].rate_bytes_per_s) {
		*wait_ns = zn_aio_cap_take(&aio->cap[io->op], len, zn_aio_now_ns());
		if (*wait_ns)
			return 0;
	}
	return len;
}

/* The request of direction op (-1: either) whose piece goes next: the first normal request
 * in queue order, else the first background one while fewer than ZN_AIO_BACKGROUND_INFLIGHT
 * background pieces are in flight; NULL when none may go (lock held). */
static struct zn_aio_req *first_of_locked(struct zn_aio *aio, int op)
{
	struct zn_aio_req *q, *bg = NULL;

	for (q = aio->head; q; q = q->next) {
		if (op >= 0 && (int)q->io.op != op)
			continue;
		if (q->io.prio != ZN_AIO_PRIO_BACKGROUND)
			return q;
		if (!bg)
			bg = q;
	}
	return bg && aio->background_inflight < ZN_AIO_BACKGROUND_INFLIGHT ? bg : NULL;
}

/* Requests are taken in order, normal before background (enum zn_aio_prio), except that
 * with a bandwidth cap a request held back by its direction's bucket does not hold back the
 * other direction: then the other direction's request goes (the caps are per direction;
 * each direction keeps this order). */
bool zn_aio_take_locked(struct zn_aio *aio, struct zn_aio_piece *p, uint64_t *wait_ns)
{
	struct zn_aio_req *req = first_of_locked(aio, -1), *other;
	const struct zn_aio_io *io;
	uint64_t len, wait2;
	char *mem;
	int buf_index;

	*wait_ns = 0;
	if (!req)
		return false;
	len = next_piece_locked(aio, req, &mem, &buf_index, wait_ns);
	if (!len) {
		other = first_of_locked(aio, req->io.op == ZN_AIO_READ ? ZN_AIO_WRITE : ZN_AIO_READ);
		if (!other)
			return false;
		len = next_piece_locked(aio, other, &mem, &buf_index, &wait2);
		if (!len) {
			if (wait2 < *wait_ns)
				*wait_ns = wait2;
			return false;
		}
		*wait_ns = 0;
		req = other;
	}
	io = &req->io;
	memset(p, 0, sizeof(*p));
	p->req = req;
	p->op = io->op;
	p->fixed_file = io->file->fixed_index >= 0;
	p->fd = p->fixed_file ? io->file->fixed_index : io->file->fd;
	p->buf_index = buf_index;
	p->offset = io->offset + req->issued_bytes;
	p->mem = mem;
	p->bytes = (uint32_t)len;
	p->background = io->prio == ZN_AIO_PRIO_BACKGROUND;
	if (p->background)
		aio->background_inflight++;
	req->issued_bytes += len;
	req->pieces_inflight++;
	if (req->issued_bytes == io->bytes)
		unlink_locked(aio, req);
	return true;
}

void zn_aio_set_fault(struct zn_aio *aio, const struct zn_aio_fault *f)
{
	uint64_t base;

	atomic_store(&aio->fault_hi, 0);
	if (!f || !f->nth)
		return;
	atomic_store(&aio->fault_writes, f->writes_only);
	base = atomic_load(f->writes_only ? &aio->wseq : &aio->seq);
	atomic_store(&aio->fault_err, f->err);
	atomic_store(&aio->fault_short_bytes, f->short_bytes);
	atomic_store(&aio->fault_lo, base + f->nth);
	atomic_store(&aio->fault_hi, base + f->nth + (f->repeat ? f->repeat : 1));
}

void zn_aio_piece_issue(struct zn_aio *aio, struct zn_aio_piece *p)
{
	uint64_t s = atomic_fetch_add(&aio->seq, 1) + 1;

	if (p->op == ZN_AIO_WRITE) {
		uint64_t w = atomic_fetch_add(&aio->wseq, 1) + 1;

		if (atomic_load(&aio->fault_writes))
			s = w;
	} else if (atomic_load(&aio->fault_writes)) {
		s = 0; /* reads are not counted */
	}
	p->fault = s >= atomic_load(&aio->fault_lo) && s < atomic_load(&aio->fault_hi);
	if (p->buf_index >= 0)
		atomic_fetch_add(&aio->fixed_buffer_pieces, 1);
	if (p->done || p->retries)
		atomic_fetch_add(&aio->resubmits, 1);
}

enum zn_piece_action zn_aio_piece_result(struct zn_aio *aio, struct zn_aio_piece *p, long res)
{
	uint32_t left = p->bytes - p->done;

	if (p->fault) {
		int err = atomic_load(&aio->fault_err);
		uint32_t short_bytes = atomic_load(&aio->fault_short_bytes);

		if (err)
			res = -err;
		else if (res > (long)short_bytes)
			res = short_bytes;
		p->fault = false;
	}
	if (res == -EINTR || res == -EAGAIN) {
		if (++p->retries <= ZN_AIO_MAX_RETRIES)
			return ZN_PIECE_AGAIN;
		p->err = (int)res;
		return ZN_PIECE_FAILED;
	}
	if (res < 0) {
		p->err = (int)res;
		return ZN_PIECE_FAILED;
	}
	if (res == 0) {
		/* Nothing moved: a read at end of file, or a device that gives up. Retrying
		 * would spin forever. */
		p->err = p->op == ZN_AIO_READ ? -ENODATA : -EIO;
		return ZN_PIECE_FAILED;
	}
	if ((uint64_t)res > left)
		res = left;
	p->done += (uint32_t)res;
	p->retries = 0;
	return p->done < p->bytes ? ZN_PIECE_AGAIN : ZN_PIECE_DONE;
}

bool zn_aio_finish_locked(struct zn_aio *aio, struct zn_aio_piece *p)
{
	struct zn_aio_req *req = p->req;
	char msg[ZN_PATH_MAX + 160];

	req->pieces_inflight--;
	if (p->background) {
		aio->background_inflight--;
		p->background = false;
	}
	if (p->err && !req->err) {
		req->err = p->err;
		req->err_offset = p->offset + p->done;
		zn_error("%s", zn_aio_req_strerror(req, msg, sizeof(msg)));
		aio->failed_requests++;
		/* Stop handing out the rest. A request has pieces left to issue only while it
		 * is in the queue. */
		if (req->issued_bytes < req->io.bytes) {
			req->issued_bytes = req->io.bytes;
			unlink_locked(aio, req);
		}
	}
	if (!p->err) {
		req->done_bytes += p->bytes;
		aio->bytes_done[p->op] += p->bytes;
	}
	if (req->issued_bytes == req->io.bytes && !req->pieces_inflight) {
		if (atomic_load_explicit(&aio->timing, memory_order_relaxed))
			req->done_ns = zn_aio_now_ns();
		__atomic_store_n(&req->done, 1, __ATOMIC_RELEASE);
		return true;
	}
	return false;
}
