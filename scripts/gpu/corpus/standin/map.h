/*
 * A small map from keys to device pointers, kept as C++'s std::map keeps it: nodes in the heap,
 * the head in a static global, and the nodes freed (not the device buffers they point to) by a
 * function registered with atexit before main, as a namespace-scope std::map's destructor is
 * registered (__cxa_atexit) by its constructor. So, as in C++, the nodes holding the pointers
 * are freed among the exit handlers, while the program holds them for its whole run.
 */
#ifndef CORPUS_STANDIN_MAP_H
#define CORPUS_STANDIN_MAP_H

#include <stdlib.h>

struct map_node {
    long key;
    void *value;
    struct map_node *next;
};

struct map {
    struct map_node *head;
    size_t size;
};

static inline void *map_find(struct map *m, long key)
{
    for (struct map_node *n = m->head; n; n = n->next)
        if (n->key == key)
            return n->value;
    return NULL;
}

static inline void map_put(struct map *m, long key, void *value)
{
    struct map_node *n = malloc(sizeof *n);
    if (!n)
        abort();
    n->key = key;
    n->value = value;
    n->next = m->head;
    m->head = n;
    m->size++;
}

static inline void map_destroy(struct map *m)
{
    while (m->head) {
        struct map_node *n = m->head;
        m->head = n->next;
        free(n);
    }
    m->size = 0;
}
#endif
