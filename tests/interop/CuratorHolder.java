// A real Apache Curator client for distlock's interop tests, driven line by line:
// the test writes commands on stdin and reads one reply line per command on stdout.
//
//   java CuratorHolder <connect string> <mode> <path>
//
// Modes name the Curator recipe on <path>: `mutex` (InterProcessMutex), `semaphore-<N>`
// (InterProcessSemaphoreV2 of N leases), `latch-<id>` (LeaderLatch with participant id
// <id>), `read` and `write` (the two locks of InterProcessReadWriteLock). Each recipe
// implements `Recipe`, so another mode is one more class and one more `case`.
//
// Commands and replies (nodes are full znode paths):
//   acquire       waits for the recipe        -> acquired <node>
//   try           one attempt, no wait        -> acquired <node> | busy
//   release       gives it back               -> released
//   participants  Curator's view of the queue -> participants [<node> ...], holder first
//                 (a latch: the participant ids, the leader first; a semaphore: the lease
//                 node names)
// A failed command replies `error <what>`. `participants` is answered at once, even
// while an `acquire` waits; the others run in order on one worker thread, because a
// Curator lock belongs to the thread that took it. End of stdin closes the session
// (deleting this client's nodes) and exits.

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.TimeUnit;
import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.CuratorFrameworkFactory;
import org.apache.curator.framework.recipes.leader.LeaderLatch;
import org.apache.curator.framework.recipes.leader.Participant;
import org.apache.curator.framework.recipes.locks.InterProcessMutex;
import org.apache.curator.framework.recipes.locks.InterProcessReadWriteLock;
import org.apache.curator.framework.recipes.locks.InterProcessSemaphoreV2;
import org.apache.curator.framework.recipes.locks.Lease;
import org.apache.curator.retry.RetryNTimes;

public final class CuratorHolder {
    /** One Curator recipe as the test drives it. */
    interface Recipe {
        /** Waits until held; returns this client's node. */
        String acquire() throws Exception;

        /** One attempt; this client's node, or null when another holds it. */
        String tryAcquire() throws Exception;

        void release() throws Exception;

        /** Every contender's node in Curator's order, the holder first. */
        List<String> participants() throws Exception;
    }

    /** InterProcessMutex: while it holds, its own node is the first participant. */
    static final class Mutex implements Recipe {
        private final InterProcessMutex mutex;

        Mutex(CuratorFramework client, String path) {
            this(new InterProcessMutex(client, path));
        }

        Mutex(InterProcessMutex mutex) {
            this.mutex = mutex;
        }

        @Override
        public String acquire() throws Exception {
            mutex.acquire();
            return ownNode();
        }

        @Override
        public String tryAcquire() throws Exception {
            return mutex.acquire(0, TimeUnit.MILLISECONDS) ? ownNode() : null;
        }

        @Override
        public void release() throws Exception {
            mutex.release();
        }

        @Override
        public List<String> participants() throws Exception {
            return new ArrayList<>(mutex.getParticipantNodes());
        }

        private String ownNode() throws Exception {
            List<String> queue = participants();
            if (queue.isEmpty()) {
                throw new IllegalStateException("acquired, but no participant node");
            }
            return queue.get(0);
        }
    }

    /** InterProcessSemaphoreV2: one lease at a time per holder. */
    static final class Semaphore implements Recipe {
        private final InterProcessSemaphoreV2 semaphore;
        private Lease lease;

        Semaphore(CuratorFramework client, String path, int leases) {
            this.semaphore = new InterProcessSemaphoreV2(client, path, leases);
        }

        @Override
        public String acquire() throws Exception {
            lease = semaphore.acquire();
            return lease.getNodeName();
        }

        @Override
        public String tryAcquire() throws Exception {
            lease = semaphore.acquire(0, TimeUnit.MILLISECONDS);
            return lease == null ? null : lease.getNodeName();
        }

        @Override
        public void release() throws Exception {
            semaphore.returnLease(lease);
            lease = null;
        }

        @Override
        public List<String> participants() throws Exception {
            return new ArrayList<>(semaphore.getParticipantNodes());
        }
    }

    /** LeaderLatch: acquire starts a latch and waits for leadership; release closes it. */
    static final class Latch implements Recipe {
        private final CuratorFramework client;
        private final String path;
        private final String id;
        private volatile LeaderLatch latch;

        Latch(CuratorFramework client, String path, String id) {
            this.client = client;
            this.path = path;
            this.id = id;
        }

        @Override
        public String acquire() throws Exception {
            LeaderLatch started = new LeaderLatch(client, path, id);
            latch = started;
            started.start();
            started.await();
            return started.getOurPath();
        }

        @Override
        public String tryAcquire() throws Exception {
            throw new UnsupportedOperationException("a latch has no try; use acquire");
        }

        @Override
        public void release() throws Exception {
            latch.close();
            latch = null;
        }

        @Override
        public List<String> participants() throws Exception {
            LeaderLatch current = latch;
            List<String> ids = new ArrayList<>();
            if (current != null) {
                for (Participant p : current.getParticipants()) {
                    ids.add(p.getId());
                }
            }
            return ids;
        }
    }

    static Recipe recipe(String mode, CuratorFramework client, String path) {
        if (mode.startsWith("semaphore-")) {
            return new Semaphore(client, path, Integer.parseInt(mode.substring("semaphore-".length())));
        }
        if (mode.startsWith("latch-")) {
            return new Latch(client, path, mode.substring("latch-".length()));
        }
        switch (mode) {
            case "mutex":
                return new Mutex(client, path);
            case "read":
                return new Mutex(new InterProcessReadWriteLock(client, path).readLock());
            case "write":
                return new Mutex(new InterProcessReadWriteLock(client, path).writeLock());
            default:
                throw new IllegalArgumentException(
                        "unknown mode `" + mode + "`; known: mutex, semaphore-<N>, latch-<id>, read, write");
        }
    }

    static void reply(String line) {
        synchronized (System.out) {
            System.out.println(line);
            System.out.flush();
        }
    }

    static String describe(Exception e) {
        return ("error " + e).replace('\n', ' ');
    }

    public static void main(String[] args) throws Exception {
        if (args.length != 3) {
            System.err.println("usage: CuratorHolder <connect string> <mode> <path>");
            System.exit(2);
        }
        CuratorFramework client =
                CuratorFrameworkFactory.newClient(args[0], 10_000, 10_000, new RetryNTimes(3, 100));
        client.start();
        if (!client.blockUntilConnected(30, TimeUnit.SECONDS)) {
            System.err.println("no ZooKeeper session with " + args[0] + " within 30 s");
            System.exit(3);
        }
        Recipe recipe = recipe(args[1], client, args[2]);
        ExecutorService worker = Executors.newSingleThreadExecutor();
        reply("ready");
        BufferedReader commands =
                new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        for (String command; (command = commands.readLine()) != null; ) {
            switch (command.trim()) {
                case "acquire":
                    worker.execute(() -> {
                        try {
                            reply("acquired " + recipe.acquire());
                        } catch (Exception e) {
                            reply(describe(e));
                        }
                    });
                    break;
                case "try":
                    worker.execute(() -> {
                        try {
                            String node = recipe.tryAcquire();
                            reply(node == null ? "busy" : "acquired " + node);
                        } catch (Exception e) {
                            reply(describe(e));
                        }
                    });
                    break;
                case "release":
                    worker.execute(() -> {
                        try {
                            recipe.release();
                            reply("released");
                        } catch (Exception e) {
                            reply(describe(e));
                        }
                    });
                    break;
                case "participants":
                    try {
                        reply(String.join(" ", prepend("participants", recipe.participants())));
                    } catch (Exception e) {
                        reply(describe(e));
                    }
                    break;
                default:
                    reply("error unknown command `" + command + "`");
            }
        }
        worker.shutdownNow();
        client.close();
        System.exit(0);
    }

    static List<String> prepend(String head, List<String> tail) {
        List<String> all = new ArrayList<>(tail.size() + 1);
        all.add(head);
        all.addAll(tail);
        return all;
    }
}
