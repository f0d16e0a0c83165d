/* zinc generate's layer streaming (generate.h: ZN_GEN_CPU, ZN_GEN_NVME): layers 1 .. n-1
 * live in page-locked host memory or in a file under --nvme-path and come to the device
 * through a ring of two slots. Layer l uses slot l % 2: its copy (copy stream) waits for
 * the slot's previous layer's compute (event free_), the compute waits for the copy (event
 * ready), so layer l+1 is copied while layer l runs. NVMe: layer l is read with pread into
 * the staging buffer l % 2 once that buffer's previous copy is complete. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/fsio.h"
#include "core/log.h"
#include "sched/generate_impl.h"

#define GEN_ALIGN 4096

static int pwrite_all(int fd, const void *buf, uint64_t n, uint64_t off, const char *path)
{
	const char *p = buf;

	while (n) {
		ssize_t w = pwrite(fd, p, n, (off_t)off);

		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0) {
			int e = w < 0 ? errno : ENOSPC;

			zn_error("zinc generate: writing the layers under --nvme-path %s: %s", path,
				 strerror(e));
			return -e;
		}
		p += w, n -= (uint64_t)w, off += (uint64_t)w;
	}
	return 0;
}

int zn_gen_streamed(const struct zn_gen *g, int l)
{
	return g->o.home != ZN_GEN_DEVICE && l >= 1;
}

static int open_file(struct zn_gen *g)
{
	char path[4096];

	snprintf(path, sizeof(path), "%s/zinc-generate-%ld.XXXXXX", g->o.nvme_path,
		 (long)getpid());
	g->fd = mkstemp(path);
	if (g->fd < 0) {
		int e = errno;

		zn_error("zinc generate: --nvme-path %s: cannot create a file there (%s): give a "
			 "writable directory", g->o.nvme_path, strerror(e));
		return -e;
	}
	(void)unlink(path); /* the layers vanish with the process, whatever ends it */
	return 0;
}

/* streamed layers, one at a time: read (init_layer) into a host buffer, then kept there
 * (CPU) or written to the file (NVMe) */
static int place_layers(struct zn_gen *g)
{
	uint64_t off = 0;
	int rc = 0;

	for (int l = 1; l < g->n && !rc; l++) {
		uint64_t b = g->L[l].numel * sizeof(float);
		float *h = g->stage_h[0];

		if (g->o.home == ZN_GEN_CPU) {
			rc = zn_device_host_alloc(g->dev, (void **)&g->params_h[l], b);
			if (rc) {
				zn_error("zinc generate: page-locked host memory for layer %d (%llu "
					 "bytes) refused: use --offload-param nvme", l,
					 (unsigned long long)b);
				break;
			}
			h = g->params_h[l];
		}
		rc = g->o.init_layer(g->o.init_ctx, l, &g->L[l], h);
		if (!rc && g->o.home == ZN_GEN_NVME) {
			g->file_off[l] = off;
			rc = pwrite_all(g->fd, h, b, off, g->o.nvme_path);
			off += (b + GEN_ALIGN - 1) / GEN_ALIGN * GEN_ALIGN;
		}
	}
	return rc;
}

int zn_gen_stream_create(struct zn_gen *g)
{
	int rc = 0;

	if (g->o.home == ZN_GEN_DEVICE)
		return 0;
	for (int l = 1; l < g->n; l++)
		if (g->L[l].numel > g->slot_numel)
			g->slot_numel = g->L[l].numel;
	for (int s = 0; s < 2 && !rc; s++) {
		rc = zn_device_alloc(g->dev, (void **)&g->slot_d[s], g->slot_numel * sizeof(float));
		if (rc)
			zn_error("zinc generate: two layer slots of %llu bytes do not fit on the "
				 "device: raise --device-mem",
				 (unsigned long long)(g->slot_numel * sizeof(float)));
		if (!rc)
			rc = zn_event_create(g->dev, &g->ready[s]);
		if (!rc)
			rc = zn_event_create(g->dev, &g->free_[s]);
		if (!rc && g->o.home == ZN_GEN_NVME)
			rc = zn_device_host_alloc(g->dev, (void **)&g->stage_h[s],
						  g->slot_numel * sizeof(float));
	}
	if (!rc && g->o.home == ZN_GEN_NVME)
		rc = open_file(g);
	if (!rc)
		rc = place_layers(g);
	return rc;
}

void zn_gen_stream_destroy(struct zn_gen *g)
{
	for (int s = 0; s < 2; s++) {
		zn_device_free(g->dev, g->slot_d[s]);
		zn_event_destroy(g->ready[s]);
		zn_event_destroy(g->free_[s]);
		if (g->dev)
			zn_device_host_free(g->dev, g->stage_h[s]);
	}
	for (int l = 0; g->params_h && l < g->n; l++)
		if (g->dev)
			zn_device_host_free(g->dev, g->params_h[l]);
	if (g->fd >= 0)
		close(g->fd);
	g->fd = -1;
}

int zn_gen_stream_issue(struct zn_gen *g, int l)
{
	const int s = l % 2;
	const uint64_t b = g->L[l].numel * sizeof(float);
	const float *src = g->params_h[l];
	int rc = 0;

	if (!zn_gen_streamed(g, l))
		return 0;
	if (g->o.home == ZN_GEN_NVME) {
		/* the staging buffer's previous copy (layer l - 2) must be complete */
		rc = zn_event_synchronize(g->ready[s]);
		if (!rc)
			rc = zn_pread_all(g->fd, g->stage_h[s], b, g->file_off[l], g->o.nvme_path);
		src = g->stage_h[s];
	}
	if (!rc)
		rc = zn_stream_wait_event(g->copy, g->free_[s]);
	if (!rc)
		rc = zn_memcpy_async(g->copy, g->slot_d[s], src, b, ZN_COPY_H2D);
	if (!rc)
		rc = zn_event_record(g->ready[s], g->copy);
	if (!rc)
		g->streamed_bytes += b;
	return rc;
}

int zn_gen_stream_acquire(struct zn_gen *g, int l, const float **params_d)
{
	if (!zn_gen_streamed(g, l)) {
		*params_d = g->params_d[l];
		return 0;
	}
	*params_d = g->slot_d[l % 2];
	return zn_stream_wait_event(g->compute, g->ready[l % 2]);
}

int zn_gen_stream_release(struct zn_gen *g, int l)
{
	if (!zn_gen_streamed(g, l))
		return 0;
	return zn_event_record(g->free_[l % 2], g->compute);
}
