// The splitter report's topology as a Kafka Streams 4.4.0 application: the
// peer tablinum's dataflow is measured beside. Reads IN, routes each record
// by its JSON "level" field (INFO / WARNING / ERROR) into OUT.info,
// OUT.warning, OUT.error, anything else into OUT.dead-letter, with
// processing.guarantee=exactly_once_v2.
//
// Tuned for speed, not for the demo: records stay byte arrays (no JSON
// decode: the level is found by a byte search for "level":" , cheaper than
// tablinum's general field scanner), lz4 like tablinum's Kafka sink, and
// THREADS stream threads (the machine's cores by default).
//
//   java -cp 'LIBS/*:DIR' Splitter BROKERS IN OUT EXPECTED COMMIT_MS [THREADS]
//
// Prints one JSON line once EXPECTED records went through and the last
// transaction committed: records, seconds from the first record to the
// close (which commits), records_per_sec.

import java.nio.charset.StandardCharsets;
import java.util.Properties;
import java.util.concurrent.atomic.AtomicLong;

import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.kstream.Branched;
import org.apache.kafka.streams.kstream.KStream;
import org.apache.kafka.streams.kstream.Produced;

public class Splitter {
    private static final byte[] KEY = "\"level\":\"".getBytes(StandardCharsets.UTF_8);

    static String level(byte[] v) {
        outer:
        for (int i = 0; i + KEY.length <= v.length; i++) {
            for (int j = 0; j < KEY.length; j++) {
                if (v[i + j] != KEY[j]) continue outer;
            }
            int s = i + KEY.length;
            int e = s;
            while (e < v.length && v[e] != '"') e++;
            return new String(v, s, e - s, StandardCharsets.US_ASCII);
        }
        return "";
    }

    public static void main(String[] args) throws Exception {
        String brokers = args[0], in = args[1], out = args[2];
        long expected = Long.parseLong(args[3]);
        String commitMs = args[4];
        int threads = args.length > 5 ? Integer.parseInt(args[5]) : Runtime.getRuntime().availableProcessors();
        Properties p = new Properties();
        p.put(StreamsConfig.APPLICATION_ID_CONFIG, "splitter-" + out);
        p.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, brokers);
        p.put(StreamsConfig.PROCESSING_GUARANTEE_CONFIG, StreamsConfig.EXACTLY_ONCE_V2);
        p.put(StreamsConfig.COMMIT_INTERVAL_MS_CONFIG, commitMs);
        p.put(StreamsConfig.NUM_STREAM_THREADS_CONFIG, threads);
        p.put(StreamsConfig.DEFAULT_KEY_SERDE_CLASS_CONFIG, Serdes.ByteArray().getClass());
        p.put(StreamsConfig.DEFAULT_VALUE_SERDE_CLASS_CONFIG, Serdes.ByteArray().getClass());
        p.put(StreamsConfig.producerPrefix("compression.type"), "lz4");
        p.put(StreamsConfig.consumerPrefix("auto.offset.reset"), "earliest");

        AtomicLong count = new AtomicLong();
        AtomicLong first = new AtomicLong(0);
        StreamsBuilder b = new StreamsBuilder();
        KStream<byte[], byte[]> s = b.<byte[], byte[]>stream(in).peek((k, v) -> {
            if (count.incrementAndGet() == 1) first.set(System.nanoTime());
        });
        Produced<byte[], byte[]> bytes = Produced.with(Serdes.ByteArray(), Serdes.ByteArray());
        s.split()
            .branch((k, v) -> level(v).equals("INFO"), Branched.withConsumer(x -> x.to(out + ".info", bytes)))
            .branch((k, v) -> level(v).equals("WARNING"), Branched.withConsumer(x -> x.to(out + ".warning", bytes)))
            .branch((k, v) -> level(v).equals("ERROR"), Branched.withConsumer(x -> x.to(out + ".error", bytes)))
            .defaultBranch(Branched.withConsumer(x -> x.to(out + ".dead-letter", bytes)));

        KafkaStreams ks = new KafkaStreams(b.build(), p);
        ks.start();
        long deadline = System.nanoTime() + 600_000_000_000L;
        while (count.get() < expected) {
            if (System.nanoTime() > deadline) {
                System.err.println("Splitter: only " + count.get() + " of " + expected + " records in 600 s");
                ks.close();
                System.exit(1);
            }
            Thread.sleep(5);
        }
        // close() commits the last transaction.
        ks.close();
        long end = System.nanoTime();
        double secs = (end - first.get()) / 1e9;
        System.out.printf("{\"records\":%d,\"seconds\":%.3f,\"records_per_sec\":%.0f,\"threads\":%d}%n",
            count.get(), secs, count.get() / secs, threads);
    }
}
