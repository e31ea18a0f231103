"""The Spark the pipeline starts itself (common.spark_session)."""


def test_the_pipelines_own_jvm_collects_garbage_with_parallel_gc(spark):
    # spark.java_options' default reaches the JVM PySpark launches: G1's beans are
    # "G1 Young Generation"/"G1 Old Generation", ParallelGC's these two
    beans = spark.sparkContext._jvm.java.lang.management.ManagementFactory.getGarbageCollectorMXBeans()
    assert {bean.getName() for bean in beans} == {"PS Scavenge", "PS MarkSweep"}
