/* replay_main.c — runs every file of a corpus directory (argv[1]) through
 * LLVMFuzzerTestOneInput once, so the fuzz target doubles as a regression
 * test under the ordinary compiler and the build's sanitizers. Fails if the
 * directory holds no input. */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cleanup.h"

/* Inputs larger than this are a corpus mistake. */
#define REPLAY_INPUT_MAX (1024 * 1024)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int replay_file(const char *path)
{
	_cleanup_fclose_ FILE *f = fopen(path, "rb");
	_cleanup_free_ uint8_t *buf = NULL;
	size_t n;

	if (!f) {
		perror(path);
		return -1;
	}
	buf = malloc(REPLAY_INPUT_MAX);
	if (!buf)
		return -1;
	n = fread(buf, 1, REPLAY_INPUT_MAX, f);
	if (ferror(f) || !feof(f)) {
		fprintf(stderr, "%s: unreadable or larger than %d bytes\n", path, REPLAY_INPUT_MAX);
		return -1;
	}
	/* An exact-size copy, so reads past the end are caught. */
	{
		_cleanup_free_ uint8_t *exact = malloc(n ? n : 1);

		if (!exact)
			return -1;
		memcpy(exact, buf, n);
		LLVMFuzzerTestOneInput(exact, n);
	}
	return 0;
}

int main(int argc, char **argv)
{
	const char *dir = argc > 1 ? argv[1] : getenv("FUZZ_CORPUS");
	struct dirent *e;
	DIR *d;
	int n = 0, bad = 0;

	if (!dir) {
		fprintf(stderr, "usage: %s CORPUS_DIR\n", argv[0]);
		return EXIT_FAILURE;
	}
	d = opendir(dir);
	if (!d) {
		perror(dir);
		return EXIT_FAILURE;
	}
	while ((e = readdir(d))) {
		char path[4096];
		struct stat st;

		snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
		if (stat(path, &st) < 0 || !S_ISREG(st.st_mode))
			continue;
		if (replay_file(path) < 0)
			bad++;
		n++;
	}
	closedir(d);
	printf("replayed %d inputs from %s\n", n, dir);
	return n > 0 && bad == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
