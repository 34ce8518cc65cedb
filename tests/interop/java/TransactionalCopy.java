// Kafka's Java client 4.4 against a Kafka-protocol bootstrap address: create a topic, commit one transaction and
// abort another, then read the topic back read_committed and read_uncommitted. Built with mvn (pom.xml next to it,
// which says how to run it): java -cp '<classes>:<classpath>' TransactionalCopy BOOTSTRAP TOPIC TRANSACTIONAL_ID
// Prints one line per record read: "<isolation> <offset> <value>", then "done".
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Properties;
import java.util.Set;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

public class TransactionalCopy {
    public static void main(String[] args) throws Exception {
        String bootstrap = args[0], topic = args[1], transactionalId = args[2];
        Properties common = new Properties();
        common.put("bootstrap.servers", bootstrap);
        try (Admin admin = Admin.create(common)) {
            admin.createTopics(List.of(new NewTopic(topic, 1, (short) 1))).all().get();
        }
        Properties p = new Properties();
        p.putAll(common);
        p.put("transactional.id", transactionalId);
        p.put("key.serializer", StringSerializer.class.getName());
        p.put("value.serializer", StringSerializer.class.getName());
        try (KafkaProducer<String, String> producer = new KafkaProducer<>(p)) {
            producer.initTransactions();
            for (String outcome : List.of("commit", "abort", "commit")) {
                producer.beginTransaction();
                for (int i = 0; i < 2; i++) {
                    producer.send(new ProducerRecord<>(topic, 0, "k", outcome + "-" + i)).get();
                }
                if (outcome.equals("commit")) {
                    producer.commitTransaction();
                } else {
                    producer.abortTransaction();
                }
            }
        }
        for (String isolation : List.of("read_committed", "read_uncommitted")) {
            Properties c = new Properties();
            c.putAll(common);
            c.put("isolation.level", isolation);
            c.put("key.deserializer", StringDeserializer.class.getName());
            c.put("value.deserializer", StringDeserializer.class.getName());
            int expected = isolation.equals("read_committed") ? 4 : 6;
            try (KafkaConsumer<String, String> consumer = new KafkaConsumer<>(c)) {
                TopicPartition tp = new TopicPartition(topic, 0);
                consumer.assign(Set.of(tp));
                consumer.seekToBeginning(Set.of(tp));
                List<ConsumerRecord<String, String>> seen = new ArrayList<>();
                long deadline = System.currentTimeMillis() + 60_000;
                while (seen.size() < expected && System.currentTimeMillis() < deadline) {
                    for (ConsumerRecord<String, String> r : consumer.poll(Duration.ofMillis(500))) {
                        seen.add(r);
                    }
                }
                for (ConsumerRecord<String, String> r : seen) {
                    System.out.println(isolation + " " + r.offset() + " " + r.value());
                }
            }
        }
        System.out.println("done");
    }
}
