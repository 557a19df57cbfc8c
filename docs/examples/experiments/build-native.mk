# A small C project for the example experiments (a stand-in for a kernel build):
# compiles noisescope's own native core, 9 C files, with make -j2.
#   make -f build-native.mk clean && make -j2 -f build-native.mk
NATIVE := ../../../src/noisescope/_native
BUILD := /tmp/noisescope-example-build
SRC := $(wildcard $(NATIVE)/*.c)
OBJ := $(patsubst $(NATIVE)/%.c,$(BUILD)/%.o,$(SRC))
PYINC := $(shell python3 -c "import sysconfig; print(sysconfig.get_paths()['include'])")
CFLAGS := -O2 -std=gnu11 -Wall -Wextra -fPIC -I$(PYINC)

all: $(OBJ)

$(BUILD)/%.o: $(NATIVE)/%.c | $(BUILD)
	$(CC) $(CFLAGS) -c $< -o $@

$(BUILD):
	mkdir -p $@

clean:
	rm -rf $(BUILD)

.PHONY: all clean
