/*
 * nvml.c - the NVML calls dtagent needs, resolved with dlopen (see nvml.h).
 *
 * Only the C ABI of the functions below is declared here (NVML's handles
 * are opaque pointers, results are ints, structs are plain).
 */
#include "nvml.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

typedef void *nvml_device;
struct nvml_memory { unsigned long long total, free, used; };
struct nvml_util { unsigned gpu, memory; };
/* nvmlProcessInfo_v1 and the larger v2 (pid, used memory, two instance ids) */
struct nvml_proc_v1 { unsigned pid; unsigned long long used; };
struct nvml_proc_v2 { unsigned pid; unsigned long long used; unsigned gi, ci; };

static struct {
	pthread_mutex_t lock;
	int tried, ok;
	char err[256];
	void *so;
	int (*init)(void);
	int (*count)(unsigned *);
	int (*handle)(unsigned, nvml_device *);
	int (*name)(nvml_device, char *, unsigned);
	int (*uuid)(nvml_device, char *, unsigned);
	int (*memory)(nvml_device, struct nvml_memory *);
	int (*util)(nvml_device, struct nvml_util *);
	int (*procs_v3)(nvml_device, unsigned *, struct nvml_proc_v2 *);
	int (*procs_v1)(nvml_device, unsigned *, struct nvml_proc_v1 *);
} nv = { .lock = PTHREAD_MUTEX_INITIALIZER };

#define SYM(field, name) (*(void **)&nv.field = dlsym(nv.so, name))

int dt_nvml_open(void)
{
	int ret;

	pthread_mutex_lock(&nv.lock);
	if (!nv.tried) {
		nv.tried = 1;
		nv.so = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
		if (!nv.so) {
			snprintf(nv.err, sizeof(nv.err), "NVML not found (%s)", dlerror());
		} else if (!SYM(init, "nvmlInit_v2") || !SYM(count, "nvmlDeviceGetCount_v2") ||
			   !SYM(handle, "nvmlDeviceGetHandleByIndex_v2") ||
			   !SYM(name, "nvmlDeviceGetName") || !SYM(memory, "nvmlDeviceGetMemoryInfo") ||
			   !SYM(util, "nvmlDeviceGetUtilizationRates")) {
			snprintf(nv.err, sizeof(nv.err), "NVML is too old (missing symbols)");
		} else {
			int r;

			SYM(uuid, "nvmlDeviceGetUUID");
			SYM(procs_v3, "nvmlDeviceGetComputeRunningProcesses_v3");
			SYM(procs_v1, "nvmlDeviceGetComputeRunningProcesses");
			r = nv.init();
			if (r)
				snprintf(nv.err, sizeof(nv.err), "nvmlInit failed (error %d: no driver loaded?)", r);
			else
				nv.ok = 1;
		}
	}
	ret = nv.ok ? 0 : -1;
	pthread_mutex_unlock(&nv.lock);
	return ret;
}

const char *dt_nvml_error(void)
{
	return nv.ok ? NULL : nv.err;
}

int dt_nvml_count(void)
{
	unsigned n = 0;

	if (dt_nvml_open() < 0)
		return 0;
	pthread_mutex_lock(&nv.lock);
	if (nv.count(&n))
		n = 0;
	pthread_mutex_unlock(&nv.lock);
	return (int)n;
}

int dt_nvml_query(int index, struct dt_gpu *g)
{
	nvml_device dev;
	struct nvml_memory mem;
	struct nvml_util util;
	int ret = -1;

	memset(g, 0, sizeof(*g));
	g->index = index;
	if (dt_nvml_open() < 0)
		return -1;
	pthread_mutex_lock(&nv.lock);
	if (nv.handle((unsigned)index, &dev))
		goto out;
	if (nv.name(dev, g->name, sizeof(g->name)))
		snprintf(g->name, sizeof(g->name), "GPU %d", index);
	if (nv.uuid && nv.uuid(dev, g->uuid, sizeof(g->uuid)))
		g->uuid[0] = '\0';
	if (!nv.memory(dev, &mem)) {
		g->memory_total = mem.total;
		g->memory_used = mem.used;
	}
	if (!nv.util(dev, &util))
		g->utilization = (int)util.gpu;
	if (nv.procs_v3) {
		struct nvml_proc_v2 p[DT_GPU_MAX_PROCS];
		unsigned n = DT_GPU_MAX_PROCS;

		if (!nv.procs_v3(dev, &n, p))
			for (unsigned i = 0; i < n && i < DT_GPU_MAX_PROCS; i++) {
				g->procs[g->nr_procs].pid = p[i].pid;
				g->procs[g->nr_procs++].used_memory = p[i].used;
			}
	} else if (nv.procs_v1) {
		struct nvml_proc_v1 p[DT_GPU_MAX_PROCS];
		unsigned n = DT_GPU_MAX_PROCS;

		if (!nv.procs_v1(dev, &n, p))
			for (unsigned i = 0; i < n && i < DT_GPU_MAX_PROCS; i++) {
				g->procs[g->nr_procs].pid = p[i].pid;
				g->procs[g->nr_procs++].used_memory = p[i].used;
			}
	}
	ret = 0;
out:
	pthread_mutex_unlock(&nv.lock);
	return ret;
}
