/* tests/fuzz/replay.c: runs files through a fuzz target without libFuzzer,
 * so that every build (gcc included, and its sanitizer setups) replays the
 * committed corpus, crash reproducers included:
 *
 *     fuzz_replay TARGET PATH...     (a PATH that is a directory: every
 *                                     regular file in it, in name order)
 *
 * Each file is run as its own input, in a buffer of exactly its size (so
 * that ASan sees any read past the end), and also every prefix of small
 * files, as libFuzzer's truncations would. A broken check aborts. */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "fuzz.h"

static size_t files, inputs;

static int run_file(rcp_fuzz_fn fn, const char *path)
{
    FILE *f = fopen(path, "rb");
    uint8_t *buf, *exact;
    long size;
    size_t n, cut;

    if (!f) {
        perror(path);
        return -1;
    }
    if (fseek(f, 0, SEEK_END) != 0 || (size = ftell(f)) < 0 || fseek(f, 0, SEEK_SET) != 0) {
        perror(path);
        fclose(f);
        return -1;
    }
    buf = malloc((size_t)size + 1);
    if (!buf || fread(buf, 1, (size_t)size, f) != (size_t)size) {
        fprintf(stderr, "%s: cannot read\n", path);
        free(buf);
        fclose(f);
        return -1;
    }
    fclose(f);
    n = (size_t)size;
    /* Whole file, then (small files) every prefix. */
    for (cut = n + 1; cut-- > 0;) {
        exact = malloc(cut ? cut : 1);
        if (!exact)
            abort();
        memcpy(exact, buf, cut);
        fn(exact, cut);
        free(exact);
        inputs++;
        if (n > 4096)
            break;
    }
    free(buf);
    files++;
    return 0;
}

static int cmp(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static int run_path(rcp_fuzz_fn fn, const char *path)
{
    struct stat st;
    DIR *d;
    struct dirent *e;
    char **names = NULL;
    size_t n = 0, i;
    int rv = 0;

    if (stat(path, &st) != 0) {
        perror(path);
        return -1;
    }
    if (!S_ISDIR(st.st_mode))
        return run_file(fn, path);
    d = opendir(path);
    if (!d) {
        perror(path);
        return -1;
    }
    while ((e = readdir(d)) != NULL) {
        char *full;
        if (e->d_name[0] == '.')
            continue;
        full = malloc(strlen(path) + strlen(e->d_name) + 2);
        names = realloc(names, (n + 1) * sizeof *names);
        if (!full || !names)
            abort();
        sprintf(full, "%s/%s", path, e->d_name);
        names[n++] = full;
    }
    closedir(d);
    if (n)
        qsort(names, n, sizeof *names, cmp);
    for (i = 0; i < n; i++) {
        if (stat(names[i], &st) == 0 && S_ISREG(st.st_mode) && run_file(fn, names[i]) < 0)
            rv = -1;
        free(names[i]);
    }
    free(names);
    return rv;
}

int main(int argc, char **argv)
{
    rcp_fuzz_fn fn;
    int i, rv = 0;

    if (argc < 3 || !(fn = rcp_fuzz_find(argv[1]))) {
        fprintf(stderr, "usage: %s reply|slots|redirect|cmd PATH...\n", argv[0]);
        return 2;
    }
    for (i = 2; i < argc; i++)
        if (run_path(fn, argv[i]) < 0)
            rv = 1;
    if (files == 0) {
        fprintf(stderr, "replay %s: no input files\n", argv[1]);
        return 1;
    }
    printf("replay %s: %zu files, %zu inputs (files and their prefixes), no crash\n", argv[1],
           files, inputs);
    return rv;
}
