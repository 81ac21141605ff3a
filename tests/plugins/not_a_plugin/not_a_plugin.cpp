// A shared library that is not a wanfw plugin: it exports a function but no plugin entry.
extern "C" int wanfw_test_not_a_plugin_answer() { return 42; }
