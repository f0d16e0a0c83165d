/* zinc info: the machine as zinc sees it: CPU, SIMD, NUMA, memory and lockable memory
 * (src/cpu/topo.h), GPUs (src/gpu/device.h), io_uring support and, for each --nvme-path,
 * its filesystem, free space and O_DIRECT support (src/nvme/aio.h). */
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/flags.h"
#include "core/args.h"
#include "core/log.h"
#include "cpu/topo.h"
#include "gpu/device.h"
#include "nvme/aio.h"

static void print_gpus(void)
{
	char why[256] = "";
	int n = zn_device_cuda_count_why(why, sizeof(why));

	if (n == 0) {
		printf("gpus: none (%s)\n", why[0] ? why : "no CUDA device");
		return;
	}
	printf("gpus: %d\n", n);
	for (int i = 0; i < n; i++) {
		struct zn_device_config dc = { .kind = ZN_DEVICE_CUDA, .ordinal = i };
		struct zn_device *dev = NULL;
		char b[32];

		if (zn_device_create(&dev, &dc)) {
			printf("  gpu %d: could not be opened\n", i);
			continue;
		}
		printf("  gpu %d: %s, default budget %s\n", i, zn_device_name(dev),
		       zn_arg_fmt_ibytes(zn_device_budget_bytes(dev), b, sizeof(b)));
		zn_device_destroy(dev);
	}
}

static void print_uring(void)
{
	struct zn_aio_probe p;

	if (zn_aio_probe(&p)) {
		printf("io_uring: probe failed\n");
		return;
	}
	if (!p.uring) {
		printf("io_uring: unavailable (%s) on kernel %s: nvme I/O uses the pread/pwrite "
		       "worker pool\n", zn_strerror(p.uring_err), p.kernel);
		return;
	}
	printf("io_uring: yes (kernel %s), fixed buffers %s, fixed files %s, "
	       "READ_FIXED/WRITE_FIXED %s\n", p.kernel, p.fixed_buffers ? "yes" : "no",
	       p.fixed_files ? "yes" : "no", p.read_fixed_op ? "yes" : "no");
}

static void print_path(const char *path)
{
	struct zn_nvme_path_probe p;
	char f[32], t[32];

	if (zn_nvme_path_probe(path, &p)) {
		printf("nvme path %s: cannot be probed (does it exist?)\n", path);
		return;
	}
	printf("nvme path %s: %s, %s free of %s, writable %s, O_DIRECT %s%s%s, fallocate %s\n",
	       path, p.fs_type, zn_arg_fmt_ibytes(p.free_bytes, f, sizeof(f)),
	       zn_arg_fmt_ibytes(p.total_bytes, t, sizeof(t)), p.writable ? "yes" : "no",
	       p.o_direct ? "yes" : "no", p.o_direct ? "" : ": ",
	       p.o_direct ? "" : zn_strerror(p.o_direct_err), p.fallocate ? "yes" : "no");
}

static void usage(FILE *f)
{
	fprintf(f, "usage: zinc info [--nvme-path DIR]...\n");
}

int zn_cmd_info(int argc, char **argv)
{
	const char *paths[ZN_MAX_NVME_PATHS];
	struct zn_cpu_info cpu;
	int n = 0;

	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
			usage(stdout);
			return 0;
		}
		if (!strcmp(argv[i], "--nvme-path") && i + 1 < argc && n < ZN_MAX_NVME_PATHS) {
			paths[n++] = argv[++i];
			continue;
		}
		zn_cli_unknown_flag("zinc info", argv[i], usage);
		return ZN_EXIT_USAGE;
	}
	printf("zinc %s\n", ZN_VERSION);
	if (zn_cpu_info_get(&cpu) == 0)
		zn_cpu_info_print(stdout, &cpu);
	else
		printf("cpu: hwloc could not load the topology\n");
	print_gpus();
	print_uring();
	for (int i = 0; i < n; i++)
		print_path(paths[i]);
	return 0;
}
