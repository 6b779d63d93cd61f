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

/* nvmlEventData_t (v2 layout; the instance ids are unused here) */
struct nvml_event { nvml_device device; unsigned long long type, data; unsigned gi, ci; };
#define NVML_ERR_TIMEOUT 10
#define NVML_ERR_GPU_IS_LOST 15
#define NVML_ERR_RESET_REQUIRED 16
#define NVML_EVENT_XID_CRITICAL 0x8ULL
#define NVML_ECC_UNCORRECTED 1       /* nvmlMemoryErrorType_t */
#define NVML_ECC_VOLATILE 0          /* nvmlEccCounterType_t */
#define NVML_ECC_AGGREGATE 1
#define NVML_TEMP_GPU 0
/* XIDs waiting to be read, per GPU */
#define XID_QUEUE 16

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
	/* health (each optional: an older driver lacks some) */
	int (*ecc)(nvml_device, int, int, unsigned long long *);
	int (*retired_pending)(nvml_device, int *);
	int (*remapped)(nvml_device, unsigned *, unsigned *, unsigned *, unsigned *);
	int (*throttle)(nvml_device, unsigned long long *);
	int (*temp)(nvml_device, int, unsigned *);
	int (*index_of)(nvml_device, unsigned *);
	int (*set_create)(void **);
	int (*reg_events)(nvml_device, unsigned long long, void *);
	int (*set_wait)(void *, struct nvml_event *, unsigned);
	void *events;                 /* the XID event set, once made */
	int events_tried;
	int xid[64][XID_QUEUE];
	int nr_xid[64];
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
			SYM(ecc, "nvmlDeviceGetTotalEccErrors");
			SYM(retired_pending, "nvmlDeviceGetRetiredPagesPendingStatus");
			SYM(remapped, "nvmlDeviceGetRemappedRows");
			if (!SYM(throttle, "nvmlDeviceGetCurrentClocksEventReasons"))
				SYM(throttle, "nvmlDeviceGetCurrentClocksThrottleReasons");
			SYM(temp, "nvmlDeviceGetTemperature");
			SYM(index_of, "nvmlDeviceGetIndex");
			SYM(set_create, "nvmlEventSetCreate");
			SYM(reg_events, "nvmlDeviceRegisterEvents");
			if (!SYM(set_wait, "nvmlEventSetWait_v2"))
				SYM(set_wait, "nvmlEventSetWait");
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

/* lock held: register every GPU for critical XIDs, once */
static void events_open(void)
{
	unsigned n = 0;

	if (nv.events_tried)
		return;
	nv.events_tried = 1;
	if (!nv.set_create || !nv.reg_events || !nv.set_wait || !nv.index_of ||
	    nv.set_create(&nv.events))
		return;
	nv.count(&n);
	for (unsigned i = 0; i < n; i++) {
		nvml_device dev;

		if (!nv.handle(i, &dev))
			nv.reg_events(dev, NVML_EVENT_XID_CRITICAL, nv.events);
	}
}

/* lock held: move what the event set has into the per-GPU queues, no wait */
static void events_drain(void)
{
	struct nvml_event e;

	for (int k = 0; nv.events && k < 256; k++) {
		unsigned idx;

		memset(&e, 0, sizeof(e));
		if (nv.set_wait(nv.events, &e, 0))
			break;             /* NVML_ERROR_TIMEOUT: nothing (more) */
		if (e.type != NVML_EVENT_XID_CRITICAL || nv.index_of(e.device, &idx) || idx >= 64)
			continue;
		if (nv.nr_xid[idx] < XID_QUEUE)
			nv.xid[idx][nv.nr_xid[idx]++] = (int)e.data;
	}
}

int dt_nvml_health(int index, struct dt_gpu_health *h)
{
	nvml_device dev;
	unsigned long long v;
	unsigned a, b, pend, fail, t;
	int r, en;

	memset(h, 0, sizeof(*h));
	h->index = index;
	h->ecc_volatile_dbe = h->ecc_aggregate_dbe = -1;
	h->retired_pages_pending = h->remap_pending = h->remap_failure = h->temperature = -1;
	if (dt_nvml_open() < 0)
		return -1;
	pthread_mutex_lock(&nv.lock);
	r = nv.handle((unsigned)index, &dev);
	if (r == NVML_ERR_GPU_IS_LOST || r == NVML_ERR_RESET_REQUIRED) {
		h->lost = r == NVML_ERR_GPU_IS_LOST;
		h->reset_required = r == NVML_ERR_RESET_REQUIRED;
		pthread_mutex_unlock(&nv.lock);
		return 0;
	}
	if (r) {
		pthread_mutex_unlock(&nv.lock);
		return -1;
	}
	if (nv.temp) {
		r = nv.temp(dev, NVML_TEMP_GPU, &t);
		if (!r)
			h->temperature = (int)t;
		h->lost |= r == NVML_ERR_GPU_IS_LOST;
		h->reset_required |= r == NVML_ERR_RESET_REQUIRED;
	}
	if (nv.ecc && !nv.ecc(dev, NVML_ECC_UNCORRECTED, NVML_ECC_VOLATILE, &v))
		h->ecc_volatile_dbe = (long long)v;
	if (nv.ecc && !nv.ecc(dev, NVML_ECC_UNCORRECTED, NVML_ECC_AGGREGATE, &v))
		h->ecc_aggregate_dbe = (long long)v;
	if (nv.retired_pending && !nv.retired_pending(dev, &en))
		h->retired_pages_pending = en != 0;
	if (nv.remapped && !nv.remapped(dev, &a, &b, &pend, &fail)) {
		h->remap_pending = pend != 0;
		h->remap_failure = fail != 0;
	}
	if (nv.throttle && !nv.throttle(dev, &v))
		h->throttle = v;
	events_open();
	events_drain();
	if (index < 64) {
		h->nr_xid = nv.nr_xid[index];
		memcpy(h->xid, nv.xid[index], sizeof(int) * (size_t)h->nr_xid);
		nv.nr_xid[index] = 0;
	}
	pthread_mutex_unlock(&nv.lock);
	return 0;
}
