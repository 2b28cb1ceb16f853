/*
 * The driver stand-in's virtual memory management (VMM): cuMemCreate, cuMemRelease,
 * cuMemAddressReserve/Free, cuMemMap/Unmap, cuMemSetAccess, cuMemRetainAllocationHandle,
 * cuMemExportToShareableHandle/cuMemImportFromShareableHandle (POSIX file descriptors) and
 * cuMemGetAllocationPropertiesFromHandle.
 *
 * As the real driver (CUDA Driver API, "Virtual Memory Management"; CUDA 13.0's
 * driver does so): a physical allocation lives until every reference to it is released and every
 * mapping of it is unmapped. A reference is the cuMemCreate or import that made a handle, or
 * a retain; cuMemRetainAllocationHandle returns the handle value that is mapped at the address
 * (the cuMemCreate's). Each physical allocation is a memfd; a reserved range is an
 * inaccessible anonymous mapping, and cuMemMap maps the memfd over it, so that a program can
 * read and write through a mapping, and still can after cuMemRelease. Device memory counts
 * against STANDIN_DEVICE_BYTES (cuMemGetInfo) until the physical allocation goes.
 */
#define _GNU_SOURCE
#include "cuda_standin.h"
#include "cuda_table.h"

#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

struct phys {
    size_t size;
    int on_device;
    int handle_types;       /* requestedHandleTypes */
    int fd;                 /* memfd holding the memory */
    ino_t ino;              /* the memfd's inode, to recognize an exported descriptor */
    unsigned long refs;     /* unreleased references over all its handles */
    unsigned long maps;     /* mappings */
    struct phys *next;
};

struct handle {
    unsigned long long value;
    unsigned long refs;     /* 0: released (invalid to the program; kept while phys lives) */
    struct phys *phys;
    struct handle *next;
};

struct mapping {
    uintptr_t va;
    size_t size;
    struct handle *handle;
    struct mapping *next;
};

static pthread_mutex_t vmm_lock = PTHREAD_MUTEX_INITIALIZER;
static struct phys *physs;
static struct handle *handles;
static struct mapping *mappings;

static struct handle *find_handle(unsigned long long value)
{
    for (struct handle *h = handles; h != NULL; h = h->next)
        if (h->value == value)
            return h;
    return NULL;
}

/* A live handle (not released), or NULL. */
static struct handle *held_handle(unsigned long long value)
{
    struct handle *h = find_handle(value);
    return h != NULL && h->refs > 0 ? h : NULL;
}

static struct handle *new_handle(struct phys *p)
{
    struct handle *h = calloc(1, sizeof *h);
    if (h == NULL)
        return NULL;
    h->value = atomic_fetch_add(&next_handle, 1);
    h->refs = 1;
    h->phys = p;
    h->next = handles;
    handles = h;
    p->refs++;
    return h;
}

/* Frees `p` (and its handles) once it has no reference and no mapping. vmm_lock held. */
static void maybe_free(struct phys *p)
{
    if (p->refs > 0 || p->maps > 0)
        return;
    for (struct handle **hh = &handles; *hh != NULL;) {
        struct handle *h = *hh;
        if (h->phys == p) {
            *hh = h->next;
            free(h);
        } else {
            hh = &h->next;
        }
    }
    for (struct phys **pp = &physs; *pp != NULL; pp = &(*pp)->next) {
        if (*pp == p) {
            *pp = p->next;
            break;
        }
    }
    if (p->on_device) {
        lock_table();
        unreserve_locked_on(0, p->size); /* device VMM memory is on device 0 (impl_cuMemCreate) */
        unlock_table();
    }
    close(p->fd);
    free(p);
}

CUresult impl_cuMemCreate(CUmemGenericAllocationHandle *handle, size_t size, const CUmemAllocationProp *prop,
                          unsigned long long flags)
{
    if (handle == NULL || prop == NULL || size == 0 || flags != 0)
        return CUDA_ERROR_INVALID_VALUE;
    if (prop->type != CU_MEM_ALLOCATION_TYPE_PINNED)
        return CUDA_ERROR_INVALID_VALUE;
    int on_device;
    if (prop->location.type == CU_MEM_LOCATION_TYPE_DEVICE) {
        if (prop->location.id != 0)
            return CUDA_ERROR_INVALID_VALUE;
        on_device = 1;
    } else if (prop->location.type == CU_MEM_LOCATION_TYPE_HOST) {
        on_device = 0;
    } else {
        return CUDA_ERROR_INVALID_VALUE;
    }
    ensure_setup();
    struct phys *p = calloc(1, sizeof *p);
    if (p == NULL)
        return CUDA_ERROR_OUT_OF_MEMORY;
    p->fd = memfd_create("standin-vmm", MFD_CLOEXEC);
    struct stat st;
    if (p->fd < 0 || ftruncate(p->fd, (off_t)size) != 0 || fstat(p->fd, &st) != 0) {
        if (p->fd >= 0)
            close(p->fd);
        free(p);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    p->ino = st.st_ino;
    p->size = size;
    p->on_device = on_device;
    p->handle_types = prop->requestedHandleTypes;
    if (on_device) {
        lock_table();
        int ok = reserve_locked_on(0, size);
        unlock_table();
        if (!ok) {
            close(p->fd);
            free(p);
            return CUDA_ERROR_OUT_OF_MEMORY;
        }
    }
    pthread_mutex_lock(&vmm_lock);
    struct handle *h = new_handle(p);
    if (h == NULL) {
        pthread_mutex_unlock(&vmm_lock);
        if (on_device) {
            lock_table();
            unreserve_locked_on(0, size);
            unlock_table();
        }
        close(p->fd);
        free(p);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    p->next = physs;
    physs = p;
    *handle = h->value;
    pthread_mutex_unlock(&vmm_lock);
    return CUDA_SUCCESS;
}

CUresult impl_cuMemRelease(CUmemGenericAllocationHandle value)
{
    pthread_mutex_lock(&vmm_lock);
    struct handle *h = held_handle(value);
    if (h == NULL) {
        pthread_mutex_unlock(&vmm_lock);
        return CUDA_ERROR_INVALID_VALUE;
    }
    h->refs--;
    h->phys->refs--;
    maybe_free(h->phys);
    pthread_mutex_unlock(&vmm_lock);
    return CUDA_SUCCESS;
}

CUresult impl_cuMemAddressReserve(CUdeviceptr *ptr, size_t size, size_t alignment, CUdeviceptr addr,
                                  unsigned long long flags)
{
    (void)alignment;
    (void)addr;
    if (ptr == NULL || size == 0 || flags != 0)
        return CUDA_ERROR_INVALID_VALUE;
    void *va = mmap(NULL, size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (va == MAP_FAILED)
        return CUDA_ERROR_OUT_OF_MEMORY;
    *ptr = (CUdeviceptr)(uintptr_t)va;
    return CUDA_SUCCESS;
}

CUresult impl_cuMemAddressFree(CUdeviceptr ptr, size_t size)
{
    if (ptr == 0 || size == 0)
        return CUDA_ERROR_INVALID_VALUE;
    return munmap((void *)(uintptr_t)ptr, size) == 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

CUresult impl_cuMemMap(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle value,
                       unsigned long long flags)
{
    if (ptr == 0 || size == 0 || flags != 0)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&vmm_lock);
    struct handle *h = held_handle(value);
    CUresult r = CUDA_ERROR_INVALID_VALUE;
    if (h == NULL || offset > h->phys->size || size > h->phys->size - offset)
        goto out;
    for (struct mapping *m = mappings; m != NULL; m = m->next)
        if ((uintptr_t)ptr < m->va + m->size && m->va < (uintptr_t)ptr + size)
            goto out; /* already mapped */
    struct mapping *m = calloc(1, sizeof *m);
    if (m == NULL) {
        r = CUDA_ERROR_OUT_OF_MEMORY;
        goto out;
    }
    if (mmap((void *)(uintptr_t)ptr, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, h->phys->fd,
             (off_t)offset) == MAP_FAILED) {
        free(m);
        r = CUDA_ERROR_OUT_OF_MEMORY;
        goto out;
    }
    m->va = (uintptr_t)ptr;
    m->size = size;
    m->handle = h;
    m->next = mappings;
    mappings = m;
    h->phys->maps++;
    r = CUDA_SUCCESS;
out:
    pthread_mutex_unlock(&vmm_lock);
    return r;
}

/* Unmaps every mapping inside [ptr, ptr + size); a mapping that sticks out of the range, or
 * a range with no mapping, is an error and nothing is unmapped. */
CUresult impl_cuMemUnmap(CUdeviceptr ptr, size_t size)
{
    uintptr_t lo = (uintptr_t)ptr, hi = lo + size;
    if (ptr == 0 || size == 0 || hi < lo)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&vmm_lock);
    int found = 0;
    for (struct mapping *m = mappings; m != NULL; m = m->next) {
        if (m->va < hi && lo < m->va + m->size) {
            if (m->va < lo || m->va + m->size > hi) {
                pthread_mutex_unlock(&vmm_lock);
                return CUDA_ERROR_INVALID_VALUE;
            }
            found = 1;
        }
    }
    if (!found) {
        pthread_mutex_unlock(&vmm_lock);
        return CUDA_ERROR_INVALID_VALUE;
    }
    for (struct mapping **mm = &mappings; *mm != NULL;) {
        struct mapping *m = *mm;
        if (m->va >= lo && m->va + m->size <= hi) {
            *mm = m->next;
            /* Back to a reservation: inaccessible again. */
            mmap((void *)m->va, m->size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE, -1, 0);
            struct phys *p = m->handle->phys;
            p->maps--;
            free(m);
            maybe_free(p);
        } else {
            mm = &m->next;
        }
    }
    pthread_mutex_unlock(&vmm_lock);
    return CUDA_SUCCESS;
}

CUresult impl_cuMemSetAccess(CUdeviceptr ptr, size_t size, const void *desc, size_t count)
{
    return ptr == 0 || size == 0 || desc == NULL || count == 0 ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS;
}

CUresult impl_cuMemRetainAllocationHandle(CUmemGenericAllocationHandle *out, void *addr)
{
    if (out == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&vmm_lock);
    for (struct mapping *m = mappings; m != NULL; m = m->next) {
        if ((uintptr_t)addr >= m->va && (uintptr_t)addr < m->va + m->size) {
            m->handle->refs++;
            m->handle->phys->refs++;
            *out = m->handle->value;
            pthread_mutex_unlock(&vmm_lock);
            return CUDA_SUCCESS;
        }
    }
    pthread_mutex_unlock(&vmm_lock);
    return CUDA_ERROR_INVALID_VALUE;
}

CUresult impl_cuMemExportToShareableHandle(void *shareable, CUmemGenericAllocationHandle value, int type,
                                           unsigned long long flags)
{
    if (shareable == NULL || flags != 0 || type != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&vmm_lock);
    struct handle *h = held_handle(value);
    CUresult r = CUDA_ERROR_INVALID_VALUE;
    if (h != NULL && (h->phys->handle_types & CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)) {
        int fd = fcntl(h->phys->fd, F_DUPFD_CLOEXEC, 3);
        if (fd >= 0) {
            *(int *)shareable = fd;
            r = CUDA_SUCCESS;
        } else {
            r = CUDA_ERROR_OUT_OF_MEMORY;
        }
    }
    pthread_mutex_unlock(&vmm_lock);
    return r;
}

/* An import of a descriptor this process exported: a new handle (another value) for the same
 * physical allocation, one more reference to it. */
CUresult impl_cuMemImportFromShareableHandle(CUmemGenericAllocationHandle *out, void *os, int type)
{
    if (out == NULL || type != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
        return CUDA_ERROR_INVALID_VALUE;
    struct stat st;
    if (fstat((int)(intptr_t)os, &st) != 0)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&vmm_lock);
    CUresult r = CUDA_ERROR_INVALID_VALUE;
    for (struct phys *p = physs; p != NULL; p = p->next) {
        if (p->ino == st.st_ino) {
            struct handle *h = new_handle(p);
            if (h != NULL) {
                *out = h->value;
                r = CUDA_SUCCESS;
            } else {
                r = CUDA_ERROR_OUT_OF_MEMORY;
            }
            break;
        }
    }
    pthread_mutex_unlock(&vmm_lock);
    return r;
}

CUresult impl_cuMemGetAllocationPropertiesFromHandle(CUmemAllocationProp *prop, CUmemGenericAllocationHandle value)
{
    if (prop == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&vmm_lock);
    struct handle *h = held_handle(value);
    if (h == NULL) {
        pthread_mutex_unlock(&vmm_lock);
        return CUDA_ERROR_INVALID_VALUE;
    }
    CUmemAllocationProp p = {0};
    p.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    p.requestedHandleTypes = h->phys->handle_types;
    p.location.type = h->phys->on_device ? CU_MEM_LOCATION_TYPE_DEVICE : CU_MEM_LOCATION_TYPE_HOST;
    p.location.id = 0;
    pthread_mutex_unlock(&vmm_lock);
    *prop = p;
    return CUDA_SUCCESS;
}

/* A context torn down: every device physical allocation goes, with its handles and mappings
 * (the ranges become reservations again). */
void vmm_reset_device(void)
{
    pthread_mutex_lock(&vmm_lock);
    for (struct mapping **mm = &mappings; *mm != NULL;) {
        struct mapping *m = *mm;
        if (m->handle->phys->on_device) {
            *mm = m->next;
            mmap((void *)m->va, m->size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE, -1, 0);
            m->handle->phys->maps--;
            free(m);
        } else {
            mm = &m->next;
        }
    }
    struct phys *p = physs;
    while (p != NULL) {
        struct phys *next = p->next;
        if (p->on_device) {
            p->refs = 0;
            maybe_free(p);
        }
        p = next;
    }
    pthread_mutex_unlock(&vmm_lock);
}
