// The broker's request counts by kind, read over JMX from a broker on this machine (SPEC P2).
//
// Run as a single-file program (`java BrokerRequests.java <broker pid> <every ms>`): it attaches
// to the broker's JVM, starts its local management agent, and prints one JSON line every
// <every ms> with the time (Unix ms) and each request kind's count since the broker started,
// from Kafka's `kafka.network:type=RequestMetrics,name=RequestsPerSec,request=<kind>` meters,
// summed over the protocol versions. `bench.broker_requests` turns two lines into rates.
//
// Kafka's request metrics are Yammer meters, reachable over JMX only; the JDK's attach API
// reaches a JVM of the same user without opening a port.

import com.sun.tools.attach.VirtualMachine;
import java.util.Map;
import java.util.TreeMap;
import javax.management.MBeanServerConnection;
import javax.management.ObjectName;
import javax.management.remote.JMXConnectorFactory;
import javax.management.remote.JMXServiceURL;

public class BrokerRequests {
    public static void main(String[] args) throws Exception {
        VirtualMachine vm = VirtualMachine.attach(args[0]);
        String address = vm.startLocalManagementAgent();
        vm.detach();
        MBeanServerConnection broker =
                JMXConnectorFactory.connect(new JMXServiceURL(address)).getMBeanServerConnection();
        long everyMs = Long.parseLong(args[1]);
        ObjectName meters = new ObjectName("kafka.network:type=RequestMetrics,name=RequestsPerSec,*");
        while (true) {
            Map<String, Long> counts = new TreeMap<>();
            long at = System.currentTimeMillis();
            for (ObjectName meter : broker.queryNames(meters, null)) {
                long count = ((Number) broker.getAttribute(meter, "Count")).longValue();
                counts.merge(meter.getKeyProperty("request"), count, Long::sum);
            }
            StringBuilder line = new StringBuilder("{\"t\":").append(at).append(",\"requests\":{");
            String comma = "";
            for (Map.Entry<String, Long> entry : counts.entrySet()) {
                line.append(comma).append('"').append(entry.getKey()).append("\":").append(entry.getValue());
                comma = ",";
            }
            System.out.println(line.append("}}"));
            System.out.flush();
            Thread.sleep(everyMs);
        }
    }
}
