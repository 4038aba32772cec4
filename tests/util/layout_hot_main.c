/* layout_hot_main.c — an empty program around the whole library (tests/util/CMakeLists.txt):
 * scripts/check_hot_layout.py reads where the linker put the hot functions (util/hot.h). */
int main(void) { return 0; }
